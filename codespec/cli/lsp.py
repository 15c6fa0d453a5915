"""``codespec lsp``: LSP over stdio for editors, relayed to the daemon (started if needed)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .common import Subparsers, UsageError, number_in, path_text


def add_parser(sub: Subparsers) -> None:
    lsp = sub.add_parser("lsp", help="LSP over stdio for editors (starts the daemon if needed)")
    lsp.add_argument("--socket", type=path_text, default=None)
    lsp.add_argument(
        "--tcp",
        type=number_in(int, 1, 65535),
        default=None,
        metavar="PORT",
        help="connect to a daemon on 127.0.0.1:PORT instead of the socket",
    )
    lsp.add_argument(
        "--pair", type=path_text, default=None, help="model pair for a daemon this starts"
    )
    lsp.add_argument(
        "--reply-deadline",
        type=number_in(float, 0.001, 86400),
        default=None,
        metavar="S",
        help="answer a request the daemon leaves unanswered this long with an error (default: 300)",
    )


def run(args: argparse.Namespace) -> int:
    from ..server.endpoint import EndpointError, TokenError, default_socket
    from ..server.relay import REPLY_DEADLINE_S, Relay, connect, connect_or_start

    deadline = REPLY_DEADLINE_S if args.reply_deadline is None else args.reply_deadline

    if args.tcp is not None:
        address = ("127.0.0.1", args.tcp)

        def connect_fn():
            return connect(None, address)
    else:
        try:
            socket_path = Path(args.socket) if args.socket else default_socket()
        except EndpointError as exc:
            raise UsageError(str(exc)) from None
        daemon_args = ["--pair", args.pair] if args.pair else []

        def connect_fn():
            return connect_or_start(socket_path, daemon_args)

    try:
        relay = Relay(connect_fn, sys.stdin.buffer, sys.stdout.buffer, reply_deadline_s=deadline)
    except (OSError, TimeoutError) as exc:
        raise UsageError(f"cannot reach the codespec daemon: {exc}") from None
    except TokenError as exc:
        raise UsageError(f"cannot authenticate to the daemon: {exc}") from None
    except EndpointError as exc:
        raise UsageError(str(exc)) from None
    return relay.run()
