"""Command line: ``codespec complete PATH:LINE:COL``, ``prepare``, ``serve``, ``lsp``, ``bench``,
``stats``, ``forget``, ``models``.

One module per subcommand (``stats`` and ``forget`` share one), its parser beside what it runs.

Bad input gets one line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable

from ..models import ModelError
from ..printable import printable
from . import bench, complete, lsp, models, prepare, serve, stats
from .common import EXIT_USAGE, Parser, UsageError, in_range

DEVICE = re.compile(r"cpu|mps|cuda(:[0-9]{1,3})?")
# flags that set a setting: checked by the setting's own limits (server/config.py)
SETTING_FLAGS = ("max_tokens", "prefix_tokens", "suffix_tokens")

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


def check_flags(args: argparse.Namespace) -> None:
    """Every flag checked before anything is loaded, each failure one line."""
    from ..server import config

    for name in SETTING_FLAGS:
        if (value := getattr(args, name, None)) is not None:
            try:
                config.check(name, value)
            except ValueError as exc:
                raise UsageError(f"--{name.replace('_', '-')} {exc}") from None
    device = getattr(args, "device", None)
    if device is not None and not DEVICE.fullmatch(device):
        raise UsageError(f"--device must be cpu, cuda, cuda:N or mps, not {device!r}")
    in_range(args, "temperature", 0, 10)
    in_range(args, "stats_retention_days", 0.01, 36500)
    in_range(args, "test_pass_delay", 0, 60)
    in_range(args, "test_load_delay", 0, 3600)
    in_range(args, "tcp", 1, 65535)
    in_range(args, "per_kind", 1, 10000)
    in_range(args, "repo_lines", 1, 40)
    in_range(args, "peer_holes", 1, 100000)
    in_range(args, "background_load", 0, 64)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        check_flags(args)
        return COMMANDS[args.command](args)
    except (UsageError, ModelError) as exc:
        print(f"codespec: error: {printable(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("codespec: interrupted", file=sys.stderr)
        return 130
