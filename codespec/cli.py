"""Command line: ``codespec complete PATH:LINE:COL``, ``codespec prepare``.

Bad input gets one line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from .models import DEFAULT_PAIR, ModelError

EXIT_USAGE = 2


class UsageError(Exception):
    """Bad input from the user: reported as one line, exit status 2."""


def parse_location(spec: str) -> tuple[Path, int, int]:
    """``PATH:LINE:COL`` (1-based) -> (path, 0-based line, 0-based column)."""
    try:
        path, line, col = spec.rsplit(":", 2)
        line_no, col_no = int(line), int(col)
    except ValueError:
        raise UsageError(f"expected PATH:LINE:COL with 1-based numbers, got {spec!r}") from None
    if line_no < 1 or col_no < 1:
        raise UsageError(f"line and column are 1-based, got {line_no}:{col_no}")
    return Path(path), line_no - 1, col_no - 1


def _add_model_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pair", default=DEFAULT_PAIR, help="model pair name or manifest path")
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:1 ... (default: cuda if any)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="codespec", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    c = sub.add_parser("complete", help="complete a file at a position, streaming to stdout")
    c.add_argument("location", help="PATH:LINE:COL, 1-based; COL counts characters")
    c.add_argument("--json", action="store_true", help="print one JSON object instead")
    c.add_argument("--no-spec", action="store_true", help="plain decoding (no speculation)")
    c.add_argument("--max-tokens", type=int, default=64)
    c.add_argument("--temperature", type=float, default=0.0)
    c.add_argument("--seed", type=int, default=None)
    c.add_argument("--draft", choices=["auto", "on", "off"], default="auto",
                   help="draft model: adaptive (default), always, never")
    c.add_argument("--prefix-tokens", type=int, default=1024)
    c.add_argument("--suffix-tokens", type=int, default=256)
    _add_model_options(c)

    p = sub.add_parser("prepare", help="join, verify and convert a pair's weights (once)")
    p.add_argument("--pair", default=DEFAULT_PAIR)
    return parser


def cmd_prepare(args: argparse.Namespace) -> int:
    from .models import load_manifest, resolve_source

    manifest = load_manifest(args.pair)
    for src in (manifest.target, manifest.draft):
        if src is not None:
            folder = resolve_source(src, manifest.install_hint, progress=_note)
            print(f"{src.label}: {folder}")
    return 0


def _note(message: str) -> None:
    print(f"codespec: {message}", file=sys.stderr, flush=True)


def cmd_complete(args: argparse.Namespace) -> int:
    from .prompt import FimRequest, build_fim_prompt, split_at

    path, line, col = parse_location(args.location)
    if args.max_tokens < 1:
        raise UsageError("--max-tokens must be at least 1")
    if args.temperature < 0:
        raise UsageError("--temperature must be >= 0")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"no such file: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {path}: {exc}") from None
    try:
        prefix, suffix = split_at(text, line, col)
    except ValueError as exc:
        raise UsageError(str(exc)) from None

    from .engine import GenerationParams
    from .runtime import load_pair

    pair = load_pair(args.pair, device=args.device, draft_mode=args.draft, progress=_note)
    request = FimRequest(prefix=prefix, suffix=suffix, path=path.name)
    prompt = build_fim_prompt(
        pair.tokenizer, pair.manifest.tokens, request, args.prefix_tokens, args.suffix_tokens
    )
    params = GenerationParams(
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        seed=args.seed,
        speculate=not args.no_spec,
    )
    generation = pair.engine.generate(prompt, params)
    printed = ""
    for _ in generation:
        if args.json:
            continue
        text_so_far = pair.tokenizer.decode(generation.tokens)
        if text_so_far.endswith("\ufffd"):  # a multi-byte character is still incomplete
            continue
        sys.stdout.write(text_so_far[len(printed) :])
        sys.stdout.flush()
        printed = text_so_far
    completion = pair.tokenizer.decode(generation.tokens)
    stats = generation.stats
    if args.json:
        print(json.dumps(completion_report(completion, stats, pair), ensure_ascii=False))
    else:
        sys.stdout.write(completion[len(printed) :] + "\n")
    return 0


def completion_report(completion: str, stats, pair) -> dict:
    """The ``--json`` object: the completion and the per-request counters."""
    return {
        "completion": completion,
        "tokens": stats.tokens,
        "target_passes": stats.target_passes,
        "tokens_per_pass": round(stats.tokens_per_pass, 3),
        "proposed": dict(stats.proposed),
        "accepted": dict(stats.accepted),
        "draft_passes": stats.draft_passes,
        "prefill_tokens": stats.prefill_tokens,
        "cached_tokens": stats.cached_tokens,
        "stop_reason": stats.stop_reason,
        "ttft_ms": round(stats.ttft_s * 1000, 1),
        "total_ms": round(stats.total_s * 1000, 1),
        "load_ms": round(pair.load_s * 1000, 1),
        "device": pair.device,
        "dtype": pair.dtype,
        "model": pair.model_label,
        "draft_model": pair.manifest.draft.label if pair.manifest.draft else None,
    }


COMMANDS = {"complete": cmd_complete, "prepare": cmd_prepare}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        return COMMANDS[args.command](args)
    except (UsageError, ModelError) as exc:
        print(f"codespec: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("codespec: interrupted", file=sys.stderr)
        return 130
