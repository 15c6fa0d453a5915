"""What `codespec bench` is asked to run: the languages, hole kinds and sizes (``choose``), the
holes cut from the corpus or recut from an earlier run, the output files checked before the run,
and the pair to load; one-line errors as ``BenchError``."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..files import FileError, parse_json, read_text
from ..languages import LANGUAGES
from ..models.user_models import pair_named
from . import corpus, sources

if TYPE_CHECKING:
    from ..runtime import LoadedPair
    from ..settings import Settings

MAX_JSON_BYTES = 256 << 20
# what the docs writer reads of a run's JSON
RESULT_KEYS = ("command", "machine", "model", "settings", "costs", "overall", "memory", "load_s")
RESULT_KEYS += ("corpus", "missing")
# the fixed subset CI runs: its languages, kinds, holes per kind and tokens per completion
QUICK_LANGUAGES, QUICK_KINDS, QUICK_PER_KIND, QUICK_MAX_TOKENS = ("python",), corpus.KINDS, 1, 32


class BenchError(Exception):
    """Bad bench input, reported as one line."""


def choose(args: argparse.Namespace) -> tuple[list[str], list[str], int, int]:
    if args.quick:
        return (
            list(QUICK_LANGUAGES),
            list(QUICK_KINDS),
            QUICK_PER_KIND,
            QUICK_MAX_TOKENS,
        )
    languages = names(args.languages, "--languages") or list(LANGUAGES)
    kinds = names(args.kinds, "--kinds") or list(corpus.KINDS)
    for name in languages:
        if name not in LANGUAGES:
            raise BenchError(f"unknown language {name!r} (known: {', '.join(LANGUAGES)})")
    for kind in kinds:
        if kind not in corpus.KINDS:
            raise BenchError(f"unknown hole kind {kind!r} (known: {', '.join(corpus.KINDS)})")
    return languages, kinds, args.per_kind, args.max_tokens


def names(given: str | None, flag: str) -> list[str]:
    """A comma-separated list from the command line; given but naming nothing is an error
    (``--languages ''`` must not mean every language)."""
    if given is None:
        return []
    names = [name.strip() for name in given.split(",") if name.strip()]
    if not names:
        raise BenchError(f"{flag} names nothing")
    return names


def check_writable(path: Path, flag: str) -> None:
    """Fail before the run, not after it, when an output file cannot be written there."""
    if path.is_dir():
        raise BenchError(f"{flag} {path}: is a directory, not a file")
    folder = path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BenchError(f"{flag} {path}: cannot create its folder ({exc.strerror})") from None
    if not os.access(folder, os.W_OK):
        raise BenchError(f"{flag} {path}: its folder is not writable")


def read_bench_json(path: Path) -> dict:
    """A saved bench run, checked to be one before anything is written from it."""
    try:
        result = parse_json(read_text(path, MAX_JSON_BYTES))
    except (FileError, ValueError) as exc:
        raise BenchError(f"{path}: not a bench JSON ({exc})") from None
    missing = [key for key in RESULT_KEYS if not isinstance(result, dict) or key not in result]
    if missing:
        raise BenchError(f"{path}: not a codespec bench JSON (it has no {', '.join(missing)})")
    return result


def cut_corpus(
    corpus_dir: Path, languages: list[str], kinds: list[str], per_kind: int, seed: int
) -> tuple[list[corpus.Hole], list[sources.Package], list[str]]:
    present = sources.packages(corpus_dir, set(languages))
    holes, missing = [], []
    for language in languages:
        if not any(p.spec.language == language for p in present):
            missing.append(f"{language}: no sources (run `codespec bench --fetch`)")
            continue
        for kind in kinds:
            found = corpus.sample_holes(present, language, kind, per_kind, seed)
            if len(found) < per_kind:
                missing.append(f"{language}/{kind}: {len(found)} of {per_kind} holes found")
            holes += found
    return holes, present, missing


def holes_from(
    recorded: Path, corpus_dir: Path
) -> tuple[list[corpus.Hole], list[sources.Package], list[str]]:
    """The holes of an earlier run's JSON, cut again from the same files."""
    try:
        described = parse_json(read_text(recorded, MAX_JSON_BYTES))["corpus"]["holes"]
    except FileError as exc:
        raise BenchError(str(exc)) from None
    except (ValueError, KeyError, TypeError) as exc:
        raise BenchError(f"{recorded}: not a codespec bench JSON ({exc})") from None
    present = sources.packages(corpus_dir)
    holes, skipped = corpus.recut_available(present, described)
    return holes, present, skipped


def command_line() -> str:
    """The command that ran, as the JSON and the docs show it ("" when not run from the CLI)."""
    return "codespec bench " + " ".join(sys.argv[2:]) if sys.argv[1:2] == ["bench"] else ""


def load_pair(args: argparse.Namespace, log, **changes: Any) -> LoadedPair:
    """The pair the flags name, loaded with the flags' options (``changes`` over them)."""
    from dataclasses import replace

    from ..runtime import LoadOptions

    options = replace(LoadOptions.from_args(args), **changes)
    return options.load(pair_named(args.pair, args.model, draft=args.draft_model), log)


def settings_for(args: argparse.Namespace, max_tokens: int) -> Settings:
    """The daemon's settings as the bench runs them (``runner.bench_settings``), with the
    ``--prompt-seconds`` the flags give."""
    from .runner import bench_settings

    seconds = args.prompt_seconds
    return bench_settings(max_tokens, **({} if seconds is None else {"prompt_seconds": seconds}))
