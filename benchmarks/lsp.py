"""Daemon latency benchmark: a new place (cold, and after the document rested), keystroke ->
first streamed text, whole single-line completion, and the relay overhead of ``codespec lsp``,
with the embedded pair on this machine.

A daemon is started on a private socket. For each cursor (line ends inside functions of a
standard-library file) the rest of the line is deleted (an incremental ``didChange``, as an
editor sends it) and a request is made at once (a truly cold place: no idle time), or, for
every other cursor, after ``--idle-s`` seconds without input (the daemon warms the prompt of the
place where the edit ended meanwhile). Then the true text is typed character by character, each
keystroke a ``didChange`` followed by an inline completion request. Relay overhead: the same
small request sent straight to the socket and through a ``codespec lsp`` process, alternately.

    .venv/bin/python benchmarks/lsp.py [--cursors 6] [--keystrokes 4] [--idle-s 3]
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "lsp"))
from rpc import RawClient, relay_client


ROOT = Path(__file__).resolve().parent.parent


def start(
    socket_path: Path, stats_db: Path | None = None, quantize: str | None = None
) -> subprocess.Popen:
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "codespec", "serve", "--socket", str(socket_path)),
            *("--no-status", "--stats-db", str(stats_db or socket_path.with_name("stats.sqlite3"))),
            *(("--quantize", quantize) if quantize else ()),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    while not socket_path.exists():
        time.sleep(0.05)
    return proc


def connect(path: Path) -> RawClient:
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(str(path))
    client = RawClient(sock)
    client.sock.settimeout(600)
    return client


def did_change(client: RawClient, uri: str, version: int, change: dict) -> None:
    client.send(
        {
            "jsonrpc": "2.0",
            "method": "textDocument/didChange",
            "params": {
                "textDocument": {"uri": uri, "version": version},
                "contentChanges": [change],
            },
        }
    )


def timed_request(client: RawClient, msg_id, uri: str, line: int, character: int):
    """Ask for an automatic inline completion at (line, character).

    Returns (seconds to the first partial or None, seconds to the reply, completion text)."""
    params = {
        "textDocument": {"uri": uri},
        "position": {"line": line, "character": character},
        "context": {"triggerKind": 2},
    }
    t0 = time.perf_counter()
    client.send(
        {
            "jsonrpc": "2.0",
            "id": msg_id,
            "method": "textDocument/inlineCompletion",
            "params": params,
        }
    )
    first = None
    while True:
        message = client.read(timeout=600)
        if (
            message.get("method") == "codespec/partialCompletion"
            and message["params"]["id"] == msg_id
        ):
            first = first if first is not None else time.perf_counter() - t0
        elif message.get("id") == msg_id:
            items = (message.get("result") or {}).get("items") or []
            return first, time.perf_counter() - t0, items[0]["insertText"] if items else ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cursors", type=int, default=6)
    ap.add_argument("--keystrokes", type=int, default=4)
    ap.add_argument("--relay-messages", type=int, default=200)
    ap.add_argument("--seed", type=int, default=2)
    ap.add_argument("--idle-s", type=float, default=3.0, help="rest before a warmed request")
    ap.add_argument("--json", default=str(ROOT / "bench-out" / "lsp.json"))
    ap.add_argument(
        "--stats-db", default=None, help="keep the session's acceptance stats in this store"
    )
    ap.add_argument("--quantize", default=None, help="the daemon's --quantize (default: auto)")
    args = ap.parse_args()

    socket_path = Path(tempfile.mkdtemp(prefix="codespec-bench-")) / "d.sock"
    daemon = start(socket_path, Path(args.stats_db) if args.stats_db else None, args.quantize)
    try:
        client = connect(socket_path)
        client.initialize()
        source = Path(sysconfig.get_paths()["stdlib"], "textwrap.py")
        text = source.read_text()
        lines = text.split("\n")
        uri = source.as_uri()
        client.send(
            {
                "jsonrpc": "2.0",
                "method": "textDocument/didOpen",
                "params": {
                    "textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": text}
                },
            }
        )
        # Not measured: the daemon loads the model while this first request waits (a user's
        # daemon has long been up when they type); it is at the top of the file, far from the
        # measured places, so it warms none of them.
        load_s = timed_request(client, "load", uri, 0, 0)[1]
        print(f"model loaded and first request answered after {load_s:.1f} s (not measured)")
        rng = random.Random(args.seed)
        spots = [
            i
            for i, line in enumerate(lines)
            if line.startswith("        ") and len(line.strip()) > 15 and 40 < i < len(lines) - 40
        ]
        version, msg = 1, 0
        first_ms, final_ms, typed_through_ms = [], [], []
        new_place = {"cold": [], "idle": []}  # (first text, whole completion) seconds
        for i, line_no in enumerate(rng.sample(spots, args.cursors)):
            line = lines[line_no]
            indent = len(line) - len(line.lstrip())
            truth = line[indent:]
            # Cut the rest of this line: the cursor sits after the indentation.
            version += 1
            cut = {
                "range": {
                    "start": {"line": line_no, "character": indent},
                    "end": {"line": line_no, "character": len(line)},
                },
                "text": "",
            }
            did_change(client, uri, version, cut)
            kind = "idle" if i % 2 else "cold"
            if kind == "idle":
                time.sleep(args.idle_s)  # the user pauses: the daemon warms this place
            col = indent
            msg += 1
            first, whole, _ = timed_request(client, msg, uri, line_no, col)
            new_place[kind].append((first if first is not None else whole, whole))
            print(f"line {line_no + 1:4} new place ({kind}): first {first} s, whole {whole} s")
            for ch in truth[: args.keystrokes]:
                version += 1
                at = {"line": line_no, "character": col}
                did_change(client, uri, version, {"range": {"start": at, "end": at}, "text": ch})
                col += 1
                msg += 1
                first, final, completion = timed_request(client, msg, uri, line_no, col)
                if first is None and completion:
                    # No text was streamed: the answer is the rest of the completion already
                    # shown, which the user is typing through (no model run).
                    typed_through_ms.append(1000 * final)
                else:
                    final_ms.append(1000 * final)
                    if first is not None:
                        first_ms.append(1000 * first)
                print(
                    f"line {line_no + 1:4} typed {truth[: col - indent]!r:12} first "
                    f"{1000 * first if first else float('nan'):6.0f} ms  final {1000 * final:6.0f}"
                    f" ms  {completion[:40]!r}",
                    flush=True,
                )
            version += 1  # restore the original text for the next cursor
            did_change(client, uri, version, {"text": text})
        relay = relay_overhead(socket_path, args.relay_messages)
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)
    report = {
        "keystroke_first_text_ms_p50": statistics.median(first_ms) if first_ms else None,
        "keystroke_first_text_ms_p90": sorted(first_ms)[int(0.9 * len(first_ms))]
        if first_ms
        else None,
        "single_line_total_ms_p50": statistics.median(final_ms) if final_ms else None,
        "model_requests": len(final_ms),
        "typed_through_answers": len(typed_through_ms),
        "typed_through_ms_p50": statistics.median(typed_through_ms) if typed_through_ms else None,
        **{
            f"new_place_{kind}_{what}_ms_p50": 1000 * statistics.median(t[j] for t in times)
            for kind, times in new_place.items()
            if times
            for j, what in enumerate(("first_text", "whole"))
        },
        "new_place_idle_s": args.idle_s,
        "keystrokes": len(final_ms) + len(typed_through_ms),
        **relay,
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))


def relay_overhead(socket_path: Path, n: int) -> dict:
    """Round trips of a tiny request, straight to the socket vs through `codespec lsp`."""
    direct = connect(socket_path)
    direct.initialize()
    relay, relayed = relay_client("--socket", str(socket_path))
    relayed.initialize()
    times = {"direct": [], "relay": []}
    for i in range(n):
        for name, c in (("direct", direct), ("relay", relayed)):
            t0 = time.perf_counter()
            c.send({"jsonrpc": "2.0", "id": f"s{i}", "method": "codespec/stats", "params": {}})
            c.reply_to(f"s{i}")
            times[name].append(time.perf_counter() - t0)
    relay.kill()
    d, r = statistics.median(times["direct"]), statistics.median(times["relay"])
    # A round trip crosses the relay twice: the per-message overhead is half the difference.
    return {
        "direct_roundtrip_ms_p50": 1000 * d,
        "relay_roundtrip_ms_p50": 1000 * r,
        "relay_overhead_ms_per_message": 1000 * (r - d) / 2,
    }


if __name__ == "__main__":
    main()
