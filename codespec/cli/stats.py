"""``codespec stats`` (acceptance figures) and ``codespec forget`` (the accepted completions
the workspace drafter learned from)."""

from __future__ import annotations

import argparse
from pathlib import Path

from .common import Subparsers, UsageError, path_text


def add_stats_parser(sub: Subparsers) -> None:
    from ..stats.report import GROUPINGS

    st = sub.add_parser("stats", help="acceptance and speculation figures per language")
    st.add_argument("--since", default="all", help="a span like 7d, 12h, 30m (default: all)")
    st.add_argument("--language", default=None, help="only this languageId")
    st.add_argument("--by", choices=list(GROUPINGS), default="language")
    st.add_argument("--json", action="store_true", help="every figure as JSON")
    st.add_argument(
        "--html", type=path_text, default=None, metavar="FILE", help="write a self-contained page"
    )
    st.add_argument(
        "--db", type=path_text, default=None, metavar="FILE", help="the store (default: state dir)"
    )
    st.add_argument(
        "--socket", type=path_text, default=None, help="the daemon's socket (asked when it runs)"
    )


def add_forget_parser(sub: Subparsers) -> None:
    fg = sub.add_parser(
        "forget", help="delete the accepted completions the workspace drafter learned from"
    )
    fg.add_argument(
        "--db",
        type=path_text,
        default=None,
        metavar="FILE",
        help="the stats store they sit beside (default: state dir)",
    )


def run_stats(args: argparse.Namespace) -> int:
    from ..daemon_client import ask_stats
    from ..stats.cli import run

    return run(args, ask_daemon=ask_stats)


def run_forget(args: argparse.Namespace) -> int:
    """Delete the accepted-completions file; a running daemon notices and forgets its copy."""
    from ..stats.schema import default_path
    from ..workspace.accepted import FILE_NAME, forget

    path = (Path(args.db) if args.db else default_path()).parent / FILE_NAME
    try:
        removed = forget(path)
    except OSError as exc:
        raise UsageError(f"cannot delete {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    print(
        f"forgot the accepted completions in {path}" if removed else f"nothing to forget: no {path}"
    )
    return 0
