"""``codespec stats``: read the store directly (no daemon needed) and print a table, JSON or
an HTML page. When a daemon runs but could not write its store, its in-memory figures are
asked for instead (``ask_daemon``, given by the CLI: ``daemon_client.py``), and the output says
so."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

from .report import ReportError, fetch, parse_since, query, table
from .schema import StoreError, default_path, open_readonly

EXIT_USAGE = 2


# Asks the running daemon for its ``codespec/stats`` reply: (socket, since, language, by) -> the
# reply, or None when no daemon answers.
AskDaemon = Callable[[str | None, str, str | None, str], dict | None]


def run(args: argparse.Namespace, ask_daemon: AskDaemon | None = None) -> int:
    try:
        parse_since(args.since)  # a bad span is a usage error before anything is read
    except ReportError as exc:
        return _fail(str(exc), EXIT_USAGE)
    path = Path(args.db) if args.db else default_path()
    if args.html and _is_store(Path(args.html), path):
        return _fail(f"--html {args.html} is the stats store itself; name another file")
    live = None
    if not args.db and ask_daemon is not None:
        live = ask_daemon(args.socket, args.since, args.language, args.by)
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
        report = query(conn, args.since, args.language, args.by)
        # the page draws its charts from the rows; the table and the JSON need none of them
        rows = fetch(conn, parse_since(args.since), args.language) if args.html else []
    report["store"] = {"path": str(path)}
    if not report["total"]["requests"] and not args.json:
        window = "" if args.since == "all" else f" in the last {args.since}"
        language = f" for {args.language}" if args.language else ""
        print(f"codespec: no completions recorded{language}{window} ({path})")
        return 0
    if args.html:
        from .html import page

        try:
            write_report(Path(args.html), page(rows, report, str(path)))
        except ReportError as exc:
            return _fail(str(exc), EXIT_USAGE)
        except OSError as exc:
            return _fail(f"cannot write {args.html}: {exc.strerror}")
        print(f"codespec: wrote {args.html}")
        return 0
    return _print(report, args)


def _is_store(target: Path, store: Path) -> bool:
    """Whether writing ``target`` would write over the store or its WAL files (by any name:
    a symlink, a relative path, a hard link)."""
    for part in (store, Path(f"{store}-wal"), Path(f"{store}-shm")):
        try:
            if os.path.samefile(target, part):
                return True
        except OSError:
            pass  # one of them does not exist
        if target.resolve() == part.resolve():
            return True
    return False


def write_report(target: Path, text: str) -> None:
    """Write ``text`` to ``target`` whole or not at all: into a new file beside it, then
    renamed over it (a symlink at ``target`` is replaced, never followed)."""
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        with os.fdopen(os.open(tmp, flags, 0o644), "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def _print(report: dict, args: argparse.Namespace) -> int:
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(table(report))
    return 0


def _fail(message: str, code: int = 1) -> int:
    print(f"codespec: error: {message}", file=sys.stderr)
    return code
