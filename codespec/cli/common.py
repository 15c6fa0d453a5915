"""What every subcommand shares: the usage error, locations, the model flags, range checks."""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from ..models import DEFAULT_PAIR

EXIT_USAGE = 2
DIGITS = re.compile(r"[0-9]{1,9}")
Subparsers = Any  # argparse's sub-parser action (its class is private)


class UsageError(Exception):
    """Bad input from the user: reported as one line, exit status 2."""


class Parser(argparse.ArgumentParser):
    """argparse, reporting a bad command line as one line (and exit status 2) rather than its
    usage block: what was wrong, and where the usage is."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"codespec: error: {message} (see {self.prog} --help)\n")


# The longest path and path component a Linux file system takes (PATH_MAX, NAME_MAX), in bytes.
MAX_PATH_BYTES = 4096
MAX_NAME_BYTES = 255


def path_text(text: str) -> str:
    """argparse's ``type=`` for every flag that names a file, a folder or a model: checked once,
    where the flag is read, so no later ``open`` or lookup meets an empty name (which would
    silently mean "the default"), a NUL, a line break (a log or status line split in two) or a
    name no file system holds."""
    if not text:
        raise argparse.ArgumentTypeError("must not be empty")
    if "\0" in text or "\n" in text or "\r" in text:
        raise argparse.ArgumentTypeError("must not hold a NUL or a line break")
    size = len(text.encode("utf-8", "surrogateescape"))
    if size > MAX_PATH_BYTES:
        raise argparse.ArgumentTypeError(f"is {size} bytes long (at most {MAX_PATH_BYTES})")
    longest = max(len(part.encode("utf-8", "surrogateescape")) for part in text.split("/"))
    if longest > MAX_NAME_BYTES:
        raise argparse.ArgumentTypeError(
            f"has a name of {longest} bytes between slashes (at most {MAX_NAME_BYTES})"
        )
    return text


def parse_location(spec: str) -> tuple[Path, int, int]:
    """``PATH:LINE:COL`` (1-based) -> (path, 0-based line, 0-based column). LINE and COL are
    ASCII digits only (``int`` would also take " 1", "+1" and other scripts' digits)."""
    parts = spec.rsplit(":", 2)
    if len(parts) != 3 or not all(DIGITS.fullmatch(p) for p in parts[1:]):
        raise UsageError(f"expected PATH:LINE:COL with 1-based numbers, got {spec!r}")
    path, line_no, col_no = parts[0], int(parts[1]), int(parts[2])
    try:
        path_text(path)
    except argparse.ArgumentTypeError as exc:
        raise UsageError(f"the path in PATH:LINE:COL {exc}") from None
    if line_no < 1 or col_no < 1:
        raise UsageError(f"line and column are 1-based, got {line_no}:{col_no}")
    return Path(path), line_no - 1, col_no - 1


def add_model_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--pair", type=path_text, default=DEFAULT_PAIR, help="model pair name or manifest path"
    )
    p.add_argument(
        "--model",
        type=path_text,
        default=None,
        metavar="NAME|PATH",
        help="a GGUF model you have instead of the pair: a name `codespec models` lists "
        "(ollama:qwen2.5-coder:7b, lmstudio:..., hf:...) or a file; the draft pairs itself",
    )
    p.add_argument(
        "--draft-model",
        type=path_text,
        default=None,
        metavar="NAME|PATH",
        help="the draft for --model, instead of the one paired by vocabulary (the same "
        "vocabulary is required)",
    )
    p.add_argument(
        "--draft-vocab",
        choices=["code", "full"],
        default="code",
        help="ggml: the draft predicts only the tokens code uses most (code, default: a cheaper "
        "step; the target still verifies every token) or its whole vocabulary (full)",
    )
    p.add_argument(
        "--device",
        type=device_name,
        default=None,
        help="cpu, cuda, cuda:1 ... (default: cuda if any)",
    )
    p.add_argument(
        "--quantize",
        choices=["auto", "off", "int4", "int8", "w8a8"],
        default=None,
        help="CPU weights: auto (the pair's choice: int4/int8 for GGUF pairs, kernels measured "
        "on this machine), off (dense bf16/fp32), int4, int8 (weight-only), w8a8 (int8 weights "
        "and activations)",
    )
    p.add_argument(
        "--backend",
        choices=["auto", "ggml", "torch"],
        default=None,
        help="what runs the model on a CPU: ggml (llama.cpp's kernels on the GGUF files), torch; "
        "auto (default): whichever this machine measured faster (once), ggml only where "
        "llama-cpp-python is installed and no --quantize is given",
    )
    p.add_argument(
        "--kernels",
        choices=["auto", "llama.cpp", "ik_llama.cpp"],
        default="auto",
        help="ggml: whose CPU kernels run the GGUF files: llama.cpp (mainline), ik_llama.cpp (a "
        "fork with kernels for 1-8 rows of every weight type), or auto (default: the one this "
        "machine measured cheaper, once; --exact runs on llama.cpp)",
    )
    p.add_argument(
        "--exact",
        action="store_true",
        help="ggml: pad every pass to the rows whose bits do not depend on its width, so "
        "speculative output is bit for bit one-row greedy decoding's (slower; by default each "
        "pass takes llama.cpp's fastest kernel, and a near-tie may round the other way)",
    )


def pair_of(args: argparse.Namespace):
    """What ``--model``, else ``--pair``, else the settings file's ``[model]`` names: a pair
    manifest, or the name of one."""
    from ..models.user_models import pair_named

    choice = model_choice(args)
    model = getattr(args, "model", None)
    if model is None and args.pair == DEFAULT_PAIR:
        model = choice.name
    return pair_named(args.pair, model, choice.folders, getattr(args, "draft_model", None))


def model_choice(args: argparse.Namespace):
    """The settings file's ``[model]`` (``server/config.py``); a bad one is a usage error."""
    from ..server.config import model_table

    config = getattr(args, "config", None)
    try:
        return model_table(Path(config) if config else None)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def note(message: str) -> None:
    print(f"codespec: {message}", file=sys.stderr, flush=True)


def number_in(kind: type[int] | type[float], low: float, high: float) -> Callable[[str], Any]:
    """argparse's ``type=`` for a number flag: its range stated beside the flag that has it,
    checked as the flag is read (argparse names the flag in its one-line error)."""
    what = "a whole number" if kind is int else "a number"

    def read(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {what}, not {text!r}") from None
        if not (math.isfinite(value) and low <= value <= high):  # (nan fails isfinite)
            raise argparse.ArgumentTypeError(f"must be from {low:g} to {high:g}, not {text}")
        return value

    return read


def setting_value(name: str) -> Callable[[str], int]:
    """argparse's ``type=`` for a flag that sets a setting: the setting's own limits
    (``server/config.py``), read only when the flag is given (the relay stays light)."""

    def read(text: str) -> int:
        from ..server import config

        try:
            return config.check(name, int(text))
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return read


DEVICE = re.compile(r"cpu|mps|cuda(:[0-9]{1,3})?")


def device_name(text: str) -> str:
    if not DEVICE.fullmatch(text):
        raise argparse.ArgumentTypeError(f"must be cpu, cuda, cuda:N or mps, not {text!r}")
    return text
