"""Command line: ``codespec complete PATH:LINE:COL``, ``prepare``, ``serve``, ``lsp``, ``bench``,
``stats``, ``forget``, ``models``.

One module per subcommand (``stats`` and ``forget`` share one), its parser beside what it runs.

Bad input gets one line on stderr and exit status 2, never a traceback: each flag's range or
form is checked where the flag is declared (argparse's ``type=``, ``cli/common.py``), before
anything is loaded.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

from ..models import ModelError
from ..printable import printable
from . import bench, complete, lsp, models, prepare, serve, stats
from .common import EXIT_USAGE, Parser, UsageError

COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "complete": complete.run,
    "prepare": prepare.run,
    "serve": serve.run,
    "lsp": lsp.run,
    "bench": bench.run,
    "stats": stats.run_stats,
    "forget": stats.run_forget,
    "models": models.run,
}


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="codespec", description=(__doc__ or "").splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    complete.add_parser(sub)
    prepare.add_parser(sub)
    serve.add_parser(sub)
    lsp.add_parser(sub)
    stats.add_stats_parser(sub)
    stats.add_forget_parser(sub)
    bench.add_parser(sub)
    models.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        return COMMANDS[args.command](args)
    except (UsageError, ModelError) as exc:
        print(f"codespec: error: {printable(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("codespec: interrupted", file=sys.stderr)
        return 130
