"""Acceptance store benchmark: what recording costs the request path, and how large the file
grows.

1. ``put`` cost: the worker thread's only stats work is appending a row to a queue; timed per
   call while the writer commits.
2. Size: 100,000 request rows with verdicts written through the store, then the file's size.
3. Side by side over real JSON-RPC: two daemons with the same tiny random model, one recording
   (``--stats-db``) and one not (``--no-stats``), asked alternately for the same completions;
   the whole-request latency p50 of each and their ratio.

    .venv/bin/python benchmarks/stats_store.py [--rows 100000] [--requests 60]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "lsp"))

from codespec.stats.record import Timing, request_row  # noqa: E402
from codespec.stats.store import Store  # noqa: E402


def fake_row(i: int) -> dict:
    timing = Timing(arrived=0.0, started=0.002, first_text=0.15, done=0.6)
    row = request_row(
        f"{i:016x}", ("python", "go", "rust")[i % 3], "single", "auto", "served", timing, "x" * 40
    )
    row.update(tokens=12, passes=7, ngram_proposed=9, ngram_accepted=5, decode_s=0.5)
    return row


def store_figures(rows: int) -> dict:
    folder = Path(tempfile.mkdtemp(prefix="codespec-stats-bench-"))
    store = Store(folder / "stats.sqlite3")
    costs = []
    started = time.perf_counter()
    for i in range(rows):
        row = fake_row(i)
        t0 = time.perf_counter()
        store.put_request(row)
        store.put_verdict(row["id"], {"shown": 1, "verdict": "accepted", "accepted_chars": 40})
        costs.append(time.perf_counter() - t0)
    queued_s = time.perf_counter() - started
    store.close()
    written_s = time.perf_counter() - started
    files = [folder / "stats.sqlite3", *folder.glob("stats.sqlite3-*")]
    size = sum(f.stat().st_size for f in files if f.exists())
    costs.sort()
    return {
        "rows": rows,
        "put_us_p50": 1e6 * costs[len(costs) // 2],
        "put_us_p99": 1e6 * costs[int(len(costs) * 0.99)],
        "queued_s": queued_s,
        "written_s": written_s,
        "bytes": size,
    }


def latency_figures(requests: int) -> dict:
    from helpers import build_tiny_pair
    from lsp_helpers import start_daemon
    from rpc import unix_client

    folder = Path(tempfile.mkdtemp(prefix="codespec-stats-bench-"))
    manifest = build_tiny_pair(folder / "pair")
    daemons = {
        "on": start_daemon(
            manifest, "--stats-db", str(folder / "s.sqlite3"), socket_path=folder / "on.sock"
        ),
        "off": start_daemon(manifest, "--no-stats", socket_path=folder / "off.sock"),
    }
    clients = {}
    for name in daemons:
        client = unix_client(folder / f"{name}.sock")
        client.send(
            {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "capabilities": {},
                    "initializationOptions": {
                        "stopRules": False,
                        "maxTokens": 16,
                        "warmAhead": False,
                    },
                },
            }
        )
        client.reply_to(0)
        client.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
        client.send(
            {
                "jsonrpc": "2.0",
                "method": "textDocument/didOpen",
                "params": {
                    "textDocument": {
                        "uri": "file:///b.py",
                        "languageId": "python",
                        "version": 1,
                        "text": "def f(x):\n    \n",
                    }
                },
            }
        )
        clients[name] = client
    times: dict[str, list[float]] = {name: [] for name in daemons}
    try:
        for i in range(requests + 5):
            for name, client in clients.items():  # alternately: the same machine noise for both
                t0 = time.perf_counter()
                client.send(
                    {
                        "jsonrpc": "2.0",
                        "id": i + 1,
                        "method": "textDocument/inlineCompletion",
                        "params": {
                            "textDocument": {"uri": "file:///b.py"},
                            "position": {"line": 1, "character": 4},
                            "context": {"triggerKind": 1},
                        },
                    }
                )
                client.reply_to(i + 1)
                if i >= 5:  # the first few warm the caches
                    times[name].append(time.perf_counter() - t0)
    finally:
        for proc in daemons.values():
            proc.terminate()
            proc.wait(timeout=30)
    on, off = statistics.median(times["on"]), statistics.median(times["off"])
    return {
        "requests": requests,
        "p50_ms_on": 1000 * on,
        "p50_ms_off": 1000 * off,
        "ratio_on_over_off": on / off,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=60)
    args = parser.parse_args()
    store = store_figures(args.rows)
    print(
        f"put (row + verdict) from the request path: p50 {store['put_us_p50']:.1f} us, "
        f"p99 {store['put_us_p99']:.1f} us"
    )
    print(
        f"{store['rows']:,} rows with verdicts: queued in {store['queued_s']:.1f} s, committed "
        f"by {store['written_s']:.1f} s; store size {store['bytes'] / 1e6:.1f} MB"
    )
    latency = latency_figures(args.requests)
    print(
        f"completion latency p50 over {latency['requests']} requests, tiny model, alternating: "
        f"store on {latency['p50_ms_on']:.1f} ms, off {latency['p50_ms_off']:.1f} ms "
        f"(ratio {latency['ratio_on_over_off']:.3f})"
    )


if __name__ == "__main__":
    main()
