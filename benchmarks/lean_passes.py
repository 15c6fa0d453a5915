"""What the decode-pass benchmarks (``decoder_pass.py``, ``pass_parts.py``) share: their
arguments, the embedded target loaded with the lean pass, the machine's line, and a real prompt
(a stdlib Python file) long enough for every context asked for."""

from __future__ import annotations

import argparse
import sys
import sysconfig
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from codespec.machine import cpu_kind, cpu_model  # noqa: E402
from codespec.runtime import LoadedPair, load_pair  # noqa: E402


def arguments(description: str, repeats: int, contexts: str) -> argparse.Namespace:
    """``--repeats``, and ``--contexts`` and ``--widths`` as lists of positive whole numbers."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--repeats", type=int, default=repeats)
    parser.add_argument("--contexts", type=numbers, default=contexts)
    parser.add_argument("--widths", type=numbers, default="1,2,4")
    return parser.parse_args()


def numbers(text: str) -> list[int]:
    """'150,1000' -> [150, 1000] (argparse turns the ValueError into a one-line usage error)."""
    values = [int(part) for part in text.split(",")]
    if min(values) < 1:
        raise ValueError(text)
    return values


def lean_target(script: str) -> LoadedPair:
    """The embedded pair without its draft, its target running the lean pass (else exit)."""
    pair = load_pair(use_draft=False, progress=lambda m: None)
    if not pair.local.target._lean():
        sys.exit(f"{script}: this model does not run the lean pass")
    return pair


def machine_line(pair: LoadedPair) -> str:
    return f"{cpu_model()} ({cpu_kind()}), {torch.get_num_threads()} threads; {pair.quantization}"


def prompt_ids(pair: LoadedPair, tokens: int) -> list[int]:
    """At least ``tokens`` ids of ``json/decoder.py`` from the stdlib (repeated if it is short)."""
    source = Path(sysconfig.get_paths()["stdlib"], "json", "decoder.py").read_text()
    ids = pair.tokenizer(source)["input_ids"]
    return ids * (tokens // len(ids) + 1)
