"""``codespec bench``: speed, speculation and quality on holes cut from real code."""

from __future__ import annotations

import argparse

from .common import Subparsers, add_model_options, number_in, path_text, setting_value


def add_parser(sub: Subparsers) -> None:
    b = sub.add_parser("bench", help="speed, speculation and quality on holes cut from real code")
    b.add_argument("--quick", action="store_true", help="a small fixed subset (minutes, for CI)")
    b.add_argument("--languages", default=None, help="comma-separated (default: all)")
    b.add_argument("--kinds", default=None, help="comma-separated of line,block,function,copy")
    b.add_argument(
        "--per-kind",
        type=number_in(int, 1, 10000),
        default=2,
        help="holes per language and kind",
    )
    b.add_argument(
        "--max-tokens",
        type=setting_value("max_tokens"),
        default=48,
        help="new tokens per completion at most",
    )
    b.add_argument(
        "--prompt-seconds",
        type=number_in(float, 0, 600),
        default=None,
        help="size prompt windows to a cold prefill of this long, as the daemon does "
        "(default: the daemon's 2.5 s); 0: fixed 1024 / 256 token windows",
    )
    b.add_argument("--seed", type=int, default=1, help="the holes are sampled from this seed")
    b.add_argument("--draft", choices=["auto", "on", "off"], default="auto")
    b.add_argument(
        "--json", type=path_text, default=None, metavar="FILE", help="write every figure here"
    )
    b.add_argument("--write-docs", action="store_true", help="regenerate the docs section")
    b.add_argument(
        "--docs", type=path_text, default="docs/benchmarks.md", help="the docs file to regenerate"
    )
    b.add_argument(
        "--docs-from", type=path_text, default=None, metavar="FILE", help="docs from a saved JSON"
    )
    b.add_argument("--fetch", action="store_true", help="download the npm/Debian sources first")
    b.add_argument(
        "--repo",
        action="store_true",
        help="holes that need other files of their package: in-file context against workspace "
        "context, side by side (--per-kind holes per language)",
    )
    b.add_argument(
        "--edits",
        action="store_true",
        help="next edits: renames and parameters whose uses should follow, reworded comments "
        "where nothing should (--per-kind cases per language; default languages: python, "
        "javascript, typescript, go, rust, java)",
    )
    b.add_argument(
        "--repo-lines",
        type=number_in(int, 1, 40),
        default=1,
        metavar="N",
        help="with --repo: each hole is the rest of its line and the N-1 lines after it",
    )
    b.add_argument(
        "--holes-from",
        type=path_text,
        default=None,
        metavar="FILE",
        help="rerun the holes of a saved JSON",
    )
    b.add_argument("--corpus-dir", type=path_text, default=None, help="where fetched sources live")
    b.add_argument("--peer", choices=["llama.cpp"], default=None, help="also run a peer")
    b.add_argument(
        "--peer-server",
        type=path_text,
        default=None,
        metavar="PATH",
        help="with --peer: also run llama.cpp's own llama-server binary at PATH, plain and with "
        "its draft-model speculation on the pair's draft",
    )
    b.add_argument(
        "--background-load",
        type=number_in(int, 0, 64),
        default=0,
        metavar="N",
        help="run N CPU-bound processes beside the measurement (a busy machine)",
    )
    b.add_argument(
        "--engine",
        action="append",
        default=None,
        metavar="[LABEL=]URL",
        help="replay the holes against this server as concurrent editors (twice: compare)",
    )
    b.add_argument(
        "--concurrency", default="1,2,4,8", help="editors at once, with --engine (default 1,2,4,8)"
    )
    b.add_argument(
        "--window-tokens",
        default=None,
        metavar="PREFIX,SUFFIX",
        help="prompt window limits in tokens (default 1024,256, the daemon's)",
    )
    b.add_argument(
        "--peer-holes",
        type=number_in(int, 1, 100000),
        default=None,
        help="run the peer on N holes, spread out",
    )
    add_model_options(b)


def run(args: argparse.Namespace) -> int:
    from ..bench.main import main as bench_main

    return bench_main(args)
