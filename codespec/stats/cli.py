"""``codespec stats``: read the store directly (no daemon needed) and print a table, JSON or
an HTML page. When a daemon runs but could not write its store, its in-memory figures are
asked for over its socket instead, and the output says so."""

from __future__ import annotations

import argparse
import json
import socket
import sys
from pathlib import Path

from ..server.framing import FramingError, frame, read_frame_sync
from .report import ReportError, parse_since, query, table
from .store import StoreError, default_path, open_readonly

EXIT_USAGE = 2


def run(args: argparse.Namespace) -> int:
    try:
        parse_since(args.since)  # a bad span is a usage error before anything is read
    except ReportError as exc:
        return _fail(str(exc), EXIT_USAGE)
    path = Path(args.db) if args.db else default_path()
    live = None if args.db else ask_daemon(_socket_path(args.socket), args)
    if live is not None and str((live.get("store") or {}).get("status", "")).startswith("memory"):
        print(
            f"codespec: the daemon could not write its store ({live['store']['status'][8:]}); "
            "these figures are held in its memory only",
            file=sys.stderr,
        )
        if args.html:
            return _fail("--html needs the store file; try again once the daemon can write it")
        return _print(live, args)
    try:
        conn = open_readonly(path)
    except StoreError as exc:
        if not path.exists():
            print(f"codespec: no completions recorded yet ({exc})")
            return 0
        return _fail(str(exc))
    with conn:
        rows, report = query(conn, args.since, args.language, args.by)
    report["store"] = {"path": str(path)}
    if not rows and not args.json:
        window = "" if args.since == "all" else f" in the last {args.since}"
        language = f" for {args.language}" if args.language else ""
        print(f"codespec: no completions recorded{language}{window} ({path})")
        return 0
    if args.html:
        from .html import page

        try:
            text = page(rows, report, str(path))
            Path(args.html).write_text(text, encoding="utf-8")
        except ReportError as exc:
            return _fail(str(exc), EXIT_USAGE)
        except OSError as exc:
            return _fail(f"cannot write {args.html}: {exc.strerror}")
        print(f"codespec: wrote {args.html}")
        return 0
    return _print(report, args)


def _print(report: dict, args: argparse.Namespace) -> int:
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(table(report))
    return 0


def _fail(message: str, code: int = 1) -> int:
    print(f"codespec: error: {message}", file=sys.stderr)
    return code


def _socket_path(given: str | None) -> Path:
    from ..server.daemon import default_socket

    return Path(given) if given else default_socket()


def ask_daemon(path: Path, args: argparse.Namespace, timeout: float = 3.0) -> dict | None:
    """The running daemon's ``codespec/stats`` reply, or None (none runs, or it did not
    answer in time)."""
    if not path.exists():
        return None
    params = {"since": args.since, "language": args.language, "by": args.by}
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(str(path))
            for message in (
                {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"capabilities": {}}},
                {"jsonrpc": "2.0", "method": "initialized", "params": {}},
                {"jsonrpc": "2.0", "id": 2, "method": "codespec/stats", "params": params},
            ):
                sock.sendall(frame(message))
            stream = sock.makefile("rb")
            while (body := read_frame_sync(stream)) is not None:
                message = json.loads(body)
                if message.get("id") == 2:
                    return message.get("result")
    except (OSError, FramingError, ValueError):
        return None
    return None
