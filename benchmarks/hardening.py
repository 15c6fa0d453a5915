"""What the hardening's costly cases cost now: edits deep in a long line and many edits in one
message (text sync), and a report over a heavy user's store (stats). Prints seconds (and the
report's peak resident memory, from a child process).

    .venv/bin/python benchmarks/hardening.py [--rows 400000]
"""

from __future__ import annotations

import argparse
import random
import resource
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from lsprotocol import types  # noqa: E402

from codespec.server.documents import Document  # noqa: E402
from codespec.stats.record import REQUEST_COLUMNS  # noqa: E402
from codespec.stats.store import Store  # noqa: E402


def insert_at(doc: Document, line: int, character: int, text: str) -> None:
    at = types.Position(line=line, character=character)
    doc.apply(
        types.TextDocumentContentChangePartial(range=types.Range(at, at), text=text), "utf-16"
    )


def edits() -> None:
    doc = Document("file:///min.js", "a\n" + "x" * 1_000_000 + "\n")
    doc.line_starts()
    t0 = time.perf_counter()
    for i in range(60):
        insert_at(doc, 1, 900_000 + i, "y")
    print(f"60 keystrokes at column 900,000 of a 1 MB line: {time.perf_counter() - t0:.3f} s")
    text = "".join(f"line {i} = {i}\n" for i in range(12_000))
    doc = Document("file:///big.py", text)
    doc.line_starts()
    rng = random.Random(1)
    t0 = time.perf_counter()
    for _ in range(5_000):
        insert_at(doc, rng.randrange(12_000), 3, "z")
    took = time.perf_counter() - t0
    print(f"5,000 one-character edits to a {len(text) // 1000} KB document: {took:.3f} s")


def report(rows: int) -> None:
    import test_stats  # the random rows of the report's own equivalence test

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "stats.sqlite3"
        Store(path).close()
        names = list(REQUEST_COLUMNS)
        made = test_stats.random_rows(random.Random(5), rows)
        conn = sqlite3.connect(path)
        with conn:
            conn.executemany(
                f"INSERT INTO requests ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})",
                [tuple(r[n] for n in names) for r in made],
            )
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()
        del made
        size = path.stat().st_size / 1e6
        for by in ("language", "kind", "day"):
            t0 = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "codespec", "stats", "--db", str(path), "--by", by],
                check=True,
                stdout=subprocess.DEVNULL,
            )
            peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
            took = time.perf_counter() - t0
            print(
                f"codespec stats --by {by} over {rows:,} rows ({size:.0f} MB): {took:.2f} s, "
                f"peak RSS of the children so far {peak:.0f} MB"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=400_000)
    args = ap.parse_args()
    edits()
    report(args.rows)


if __name__ == "__main__":
    main()
