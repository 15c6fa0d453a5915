"""``codespec complete PATH:LINE:COL``: one completion, streamed to stdout."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..files import MAX_DOCUMENT_BYTES, FileError, read_text
from .common import (
    Subparsers,
    UsageError,
    add_model_options,
    note,
    number_in,
    pair_of,
    parse_location,
    setting_value,
)


def add_parser(sub: Subparsers) -> None:
    c = sub.add_parser("complete", help="complete a file at a position, streaming to stdout")
    c.add_argument("location", help="PATH:LINE:COL, 1-based; COL counts characters")
    c.add_argument("--json", action="store_true", help="print one JSON object instead")
    c.add_argument("--no-spec", action="store_true", help="plain decoding (no speculation)")
    c.add_argument("--max-tokens", type=setting_value("max_tokens"), default=128)
    c.add_argument("--temperature", type=number_in(float, 0, 10), default=0.0)
    c.add_argument("--seed", type=int, default=None)
    c.add_argument(
        "--draft",
        choices=["auto", "on", "off"],
        default="auto",
        help="draft model: adaptive (default), always, never",
    )
    c.add_argument(
        "--mode",
        choices=["auto", "line", "block"],
        default="auto",
        help="how much to complete (default: decided by the syntax at the cursor)",
    )
    c.add_argument(
        "--no-stop-rules",
        action="store_true",
        help="no syntax-aware stop rules: stop only at end-of-text or --max-tokens",
    )
    c.add_argument("--language", default=None, help="language id (default: from the extension)")
    for flag in ("--prefix-tokens", "--suffix-tokens"):
        read = setting_value(flag.removeprefix("--").replace("-", "_"))
        c.add_argument(flag, type=read, default=None, help="(default: the setting's)")
    add_model_options(c)


def run(args: argparse.Namespace) -> int:
    from ..prompt import split_at

    path, line, col = parse_location(args.location)
    try:
        text = read_text(path, MAX_DOCUMENT_BYTES)
    except FileError as exc:
        raise UsageError(str(exc)) from None
    try:
        prefix, suffix = split_at(text, line, col)
    except ValueError as exc:
        raise UsageError(str(exc)) from None

    from ..completion import complete
    from ..languages import language_for
    from ..runtime import LoadOptions
    from ..settings import Settings, completion_options
    from ..stops import Cursor, Mode

    pair = LoadOptions.from_args(args).load(pair_of(args), note)
    windows = {"prefix_tokens": args.prefix_tokens, "suffix_tokens": args.suffix_tokens}
    settings = Settings(
        max_tokens=args.max_tokens,
        line_max_tokens=args.max_tokens,
        speculate=not args.no_spec,
        stop_rules=not args.no_stop_rules,
        prompt_seconds=0.0,  # the windows as given: a single run has no time budget to keep
        warm_ahead=False,
        **{name: value for name, value in windows.items() if value is not None},
    )
    options = completion_options(
        settings,
        invoked=True,  # the user asked explicitly
        temperature=args.temperature,
        seed=args.seed,
        mode=None if args.mode == "auto" else Mode(args.mode),
    )
    cursor = Cursor(prefix, suffix, language_for(args.language, str(path)))
    printed = ""

    def stream(text_so_far: str) -> None:
        nonlocal printed
        if not args.json and text_so_far.startswith(printed):
            sys.stdout.write(text_so_far[len(printed) :])
            sys.stdout.flush()
            printed = text_so_far

    result = complete(pair, cursor, options, path=path.name, on_text=stream)
    if args.json:
        print(json.dumps(completion_report(result, pair), ensure_ascii=False))
    elif result.text.startswith(printed):
        sys.stdout.write(result.text[len(printed) :] + "\n")
    else:  # shaping trimmed what was streamed (a duplicated bracket, a broken line): show it
        sys.stdout.write(f"\n--- final completion ---\n{result.text}\n")
    return 0


def completion_report(result: Any, pair: Any) -> dict:
    """The ``--json`` object: the completion and the per-request counters."""
    stats = result.stats
    if stats is None:  # no completion at this position: nothing ran
        from ..engine import GenerationStats

        stats = GenerationStats(stop_reason="mode_none")
    return {
        "completion": result.text,
        "mode": result.mode.value,
        "prompt_tokens": result.prompt_tokens,
        "tokens": stats.tokens,
        "target_passes": stats.target_passes,
        "tokens_per_pass": round(stats.tokens_per_pass, 3),
        "proposed": dict(stats.proposed),
        "accepted": dict(stats.accepted),
        "draft_passes": stats.draft_passes,
        "prefill_tokens": stats.prefill_tokens,
        "cached_tokens": stats.cached_tokens,
        "stop_reason": stats.stop_reason,
        "dropped_past_stop": stats.dropped_past_stop,
        "ttft_ms": round(stats.ttft_s * 1000, 1),
        "total_ms": round(stats.total_s * 1000, 1),
        "load_ms": round(pair.load_s * 1000, 1),
        "device": pair.device,
        "dtype": pair.dtype,
        "model": pair.model_label,
        "draft_model": pair.manifest.draft.label if pair.manifest.draft else None,
    }
