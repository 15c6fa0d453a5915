"""Daemon latency benchmark: a new place (cold, and after the document rested), keystroke ->
first streamed text, whole single-line completion, and the relay overhead of ``codespec lsp``,
with the embedded pair on this machine.

A daemon is started on a private socket. For each cursor (line ends inside functions of a
standard-library file) the rest of the line is deleted (an incremental ``didChange``, as an
editor sends it) and a request is made at once (a truly cold place: no idle time), or, for
every other cursor, after ``--idle-s`` seconds without input (the daemon warms the prompt of the
place where the edit ended meanwhile). Then the true text is typed character by character, each
keystroke ``--think-ms`` after the answer to the one before (the user reads it and types on): a
``didChange`` and an inline completion request. Every place is typed twice, with the
``lookAheadKeys`` setting at ``--look-ahead-keys`` and at 0 (which goes first alternates), so
that the look-ahead's effect is measured side by side on the same keystrokes; the keystrokes
it answered from rows computed ahead are counted from the daemon's ``ahead_hits``. Typing at
speed: at ``--bursts`` more places (warmed, answered), ``--burst-keys`` characters typed
``--burst-ms`` apart, each request sent without waiting for the one before (which the daemon
then drops): the first text of each keystroke's own request, and of the last one of the burst,
what the user sees once they pause. Relay overhead: the same small request sent straight to the
socket and through a ``codespec lsp`` process, alternately.

The single-line figure is a median over the requests the model answered (most keystrokes are
typed through the text already shown), so it rests on few of them: at 8 cursors, 9 each way,
and one place of docstring prose moved it from ~400 to ~800 ms between two runs on one machine;
the default of 16 cursors gives ~20 each way (~5 min on a 2-core CPU).

    .venv/bin/python benchmarks/lsp.py [--cursors 16] [--keystrokes 4] [--idle-s 3]
        [--think-ms 400] [--look-ahead-keys 8] [--bursts 4] [--burst-keys 5] [--burst-ms 150]
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
from rpc import RawClient, inline_request, relay_client
from codespec.machine import cpu_kind


ROOT = Path(__file__).resolve().parent.parent


def start(
    socket_path: Path,
    stats_db: Path | None = None,
    quantize: str | None = None,
    backend: str | None = None,
    kernels: str | None = None,
) -> subprocess.Popen:
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "codespec", "serve", "--socket", str(socket_path)),
            *("--no-status", "--stats-db", str(stats_db or socket_path.with_name("stats.sqlite3"))),
            *(("--quantize", quantize) if quantize else ()),
            *(("--backend", backend) if backend else ()),
            *(("--kernels", kernels) if kernels else ()),
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
    t0 = time.perf_counter()
    client.send(inline_request(msg_id, uri, line, character, trigger_kind=2))
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


def cut_after_indent(line_no: int, line: str) -> dict:
    """The incremental change that deletes ``line`` after its indentation."""
    indent = len(line) - len(line.lstrip())
    return {
        "range": {
            "start": {"line": line_no, "character": indent},
            "end": {"line": line_no, "character": len(line)},
        },
        "text": "",
    }


def typing_burst(
    client: RawClient, uri: str, version: int, line: int, column: int, chars: str, gap_s: float
) -> list[tuple[float | None, float | None, str]]:
    """Type ``chars`` at (line, column), one ``didChange`` and request every ``gap_s`` seconds
    whatever the answers, then wait for the last answer. Per keystroke: seconds from its request
    to its first partial text and to its reply (None for what never came; the daemon answers a
    dropped request, empty, once the next keystroke supersedes it), and the reply's text."""
    sent: dict[str, float] = {}
    first: dict[str, float] = {}
    reply: dict[str, tuple[float, str]] = {}
    for i, ch in enumerate(chars):
        at = {"line": line, "character": column + i}
        did_change(client, uri, version + i + 1, {"range": {"start": at, "end": at}, "text": ch})
        msg_id = f"burst-{version}-{i}"
        client.send(inline_request(msg_id, uri, line, column + i + 1, trigger_kind=2))
        sent[msg_id] = time.perf_counter()
        last = i == len(chars) - 1
        until = sent[msg_id] + (600 if last else gap_s)
        while time.perf_counter() < until and not (last and msg_id in reply):
            client.sock.settimeout(max(0.001, until - time.perf_counter()))
            try:
                message = client.read(timeout=until - time.perf_counter())
            except (TimeoutError, OSError):  # nothing came before the next keystroke is due
                break
            now = time.perf_counter()
            if message.get("method") == "codespec/partialCompletion":
                first.setdefault(message["params"]["id"], now)
            elif message.get("id") in sent:
                items = (message.get("result") or {}).get("items") or []
                reply[message["id"]] = (now, items[0]["insertText"] if items else "")
    client.sock.settimeout(600)
    out = []
    for k, t in sent.items():
        done, text = reply.get(k, (None, ""))
        out.append((first[k] - t if k in first else None, done - t if done else None, text))
    return out


def burst_mark(first: float | None, _reply: float | None, shown: str) -> str:
    """A burst keystroke in a line of output: ms to its first text, t (typed through: its
    answer is the completion already shown), or - (nothing before the next keystroke)."""
    return f"{1000 * first:.0f}" if first is not None else ("t" if shown else "-")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cursors", type=int, default=16)
    ap.add_argument("--keystrokes", type=int, default=4)
    ap.add_argument("--relay-messages", type=int, default=200)
    ap.add_argument("--seed", type=int, default=2)
    ap.add_argument("--idle-s", type=float, default=3.0, help="rest before a warmed request")
    ap.add_argument(
        "--think-ms", type=float, default=400.0, help="pause after an answer before a keystroke"
    )
    ap.add_argument(
        "--look-ahead-keys", type=int, default=8, help="the setting's value for the 'on' rounds"
    )
    ap.add_argument("--bursts", type=int, default=4, help="places typed at speed")
    ap.add_argument("--burst-keys", type=int, default=5, help="characters in each burst")
    ap.add_argument("--burst-ms", type=float, default=150.0, help="between keystrokes of a burst")
    ap.add_argument("--json", default=str(ROOT / "bench-out" / "lsp.json"))
    ap.add_argument(
        "--stats-db", default=None, help="keep the session's acceptance stats in this store"
    )
    ap.add_argument("--quantize", default=None, help="the daemon's --quantize (default: auto)")
    ap.add_argument(
        "--backend", default=None, choices=["auto", "ggml", "torch"], help="the daemon's --backend"
    )
    ap.add_argument(
        "--kernels",
        default=None,
        choices=["auto", "llama.cpp", "ik_llama.cpp"],
        help="the daemon's --kernels",
    )
    args = ap.parse_args()

    socket_path = Path(tempfile.mkdtemp(prefix="codespec-bench-")) / "d.sock"
    stats_db = Path(args.stats_db) if args.stats_db else None
    daemon = start(socket_path, stats_db, args.quantize, args.backend, args.kernels)
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
        typed_through_ms = []
        # per look-ahead setting ("on": lookAheadKeys as configured, "off": 0): first text and
        # whole completion of keystrokes that ran the model; and which of them were looked ahead
        first_ms = {"on": [], "off": []}
        final_ms = {"on": [], "off": []}
        ahead_first_ms: list[float] = []
        paired: dict[tuple[int, int], dict[str, float]] = {}  # (place, key) -> setting -> final
        new_place = {"cold": [], "idle": []}  # (first text, whole completion) seconds
        cursors = rng.sample(spots, args.cursors)
        for i, line_no in enumerate(cursors):
            line = lines[line_no]
            indent = len(line) - len(line.lstrip())
            truth = line[indent:]
            # both settings at every place, in turn (which goes first alternates every 2 places)
            rounds = ("on", "off") if (i // 2) % 2 == 0 else ("off", "on")
            for r, setting in enumerate(rounds):
                look_ahead(client, args.look_ahead_keys if setting == "on" else 0)
                # Cut the rest of this line: the cursor sits after the indentation.
                version += 1
                did_change(client, uri, version, cut_after_indent(line_no, line))
                kind = "idle" if i % 2 else "cold"
                if kind == "idle" or r:
                    time.sleep(args.idle_s)  # the user pauses: the daemon warms this place
                col = indent
                msg += 1
                first, whole, _ = timed_request(client, msg, uri, line_no, col)
                if not r:  # the second round's place is not new
                    new_place[kind].append((first if first is not None else whole, whole))
                    print(
                        f"line {line_no + 1:4} new place ({kind}): first {first} s, whole {whole} s"
                    )
                for key, ch in enumerate(truth[: args.keystrokes]):
                    time.sleep(args.think_ms / 1000)  # the user reads the answer, types on
                    version += 1
                    at = {"line": line_no, "character": col}
                    did_change(
                        client, uri, version, {"range": {"start": at, "end": at}, "text": ch}
                    )
                    col += 1
                    msg += 1
                    hits = daemon_stats(client)["ahead_hits"]
                    first, final, completion = timed_request(client, msg, uri, line_no, col)
                    ahead = daemon_stats(client)["ahead_hits"] > hits
                    if first is None and completion:
                        # No text was streamed: the answer is the rest of the completion already
                        # shown, which the user is typing through (no model run).
                        typed_through_ms.append(1000 * final)
                    else:
                        final_ms[setting].append(1000 * final)
                        paired.setdefault((i, key), {})[setting] = 1000 * final
                        if first is not None:
                            first_ms[setting].append(1000 * first)
                            if ahead:
                                ahead_first_ms.append(1000 * first)
                    print(
                        f"line {line_no + 1:4} look-ahead {setting:3} typed "
                        f"{truth[: col - indent]!r:12} first "
                        f"{1000 * first if first else float('nan'):6.0f} ms"
                        f"{' (ahead)' if ahead else ''}  final {1000 * final:6.0f} ms  "
                        f"{completion[:40]!r}",
                        flush=True,
                    )
                version += 1  # restore the original text for the next round or cursor
                did_change(client, uri, version, {"text": text})
        look_ahead(client, args.look_ahead_keys)
        # Typing at speed, at places of their own (the ones above stay as in earlier runs).
        burst_own_ms, burst_last_ms, burst_keys, burst_last_typed_through = [], [], 0, 0
        others = [s for s in spots if s not in cursors]
        for line_no in random.Random(args.seed + 1).sample(others, min(args.bursts, len(others))):
            line = lines[line_no]
            indent = len(line) - len(line.lstrip())
            version += 1
            did_change(client, uri, version, cut_after_indent(line_no, line))
            time.sleep(args.idle_s)  # the place is warmed and answered before the burst
            msg += 1
            timed_request(client, msg, uri, line_no, indent)
            chars = line[indent:][: args.burst_keys]
            keys = typing_burst(client, uri, version, line_no, indent, chars, args.burst_ms / 1000)
            version += len(chars)
            burst_keys += len(keys)
            burst_own_ms += [1000 * f for f, _, _ in keys if f is not None]
            # Once the user pauses they see the last key's streamed text, or its reply where
            # that is the completion already shown, typed through (no model run).
            f, _, shown = keys[-1]
            if f is not None:
                burst_last_ms.append(1000 * f)
            elif shown:
                burst_last_typed_through += 1
            print(
                f"line {line_no + 1:4} burst {chars!r}: first text per key (ms; t: typed "
                f"through, -: none before the next key) {' '.join(burst_mark(*k) for k in keys)}",
                flush=True,
            )
            version += 1
            did_change(client, uri, version, {"text": text})
        relay = relay_overhead(socket_path, args.relay_messages)
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)
    both = [t for t in paired.values() if len(t) == 2]
    report = {
        "cpu_kind": cpu_kind(),
        "backend": args.backend or "auto",
        "think_ms": args.think_ms,
        "look_ahead_keys": args.look_ahead_keys,
        **{
            f"keystroke_first_text_ms_{stat}{'' if setting == 'on' else '_look_ahead_off'}": value
            for setting in ("on", "off")
            for stat, value in percentiles(first_ms[setting]).items()
        },
        "single_line_total_ms_p50": median(final_ms["on"]),
        "single_line_total_ms_p50_look_ahead_off": median(final_ms["off"]),
        # the same keystrokes both ways (each ran the model in both rounds)
        "single_line_total_ms_sum_paired": sum(t["on"] for t in both),
        "single_line_total_ms_sum_paired_look_ahead_off": sum(t["off"] for t in both),
        "model_requests": len(final_ms["on"]),
        "model_requests_look_ahead_off": len(final_ms["off"]),
        "keystrokes_looked_ahead": len(ahead_first_ms),
        "looked_ahead_first_text_ms_p50": median(ahead_first_ms),
        "not_looked_ahead_first_text_ms_p50": median(
            [t for t in first_ms["on"] if t not in ahead_first_ms]
        ),
        "typed_through_answers": len(typed_through_ms),
        "typed_through_ms_p50": statistics.median(typed_through_ms) if typed_through_ms else None,
        **{
            f"new_place_{kind}_{what}_ms_p50": 1000 * statistics.median(t[j] for t in times)
            for kind, times in new_place.items()
            if times
            for j, what in enumerate(("first_text", "whole"))
        },
        "new_place_idle_s": args.idle_s,
        "burst_ms": args.burst_ms,
        "burst_keystrokes": burst_keys,
        "burst_keystrokes_with_own_first_text": len(burst_own_ms),
        "burst_own_first_text_ms_p50": statistics.median(burst_own_ms) if burst_own_ms else None,
        "burst_last_key_first_text_ms_p50": statistics.median(burst_last_ms)
        if burst_last_ms
        else None,
        "burst_last_key_typed_through": burst_last_typed_through,
        "keystrokes": len(final_ms["on"]) + len(final_ms["off"]) + len(typed_through_ms),
        **relay,
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def percentiles(values: list[float]) -> dict[str, float | None]:
    ordered = sorted(values)
    return {"p50": median(values), "p90": ordered[int(0.9 * len(ordered))] if values else None}


def daemon_stats(client: RawClient) -> dict:
    """The daemon's counters (``codespec/stats``)."""
    client.send({"jsonrpc": "2.0", "id": "stats", "method": "codespec/stats", "params": {}})
    return client.reply_to("stats")["result"]["daemon"]


def look_ahead(client: RawClient, keys: int) -> None:
    """Set the session's ``lookAheadKeys``."""
    client.send(
        {
            "jsonrpc": "2.0",
            "method": "workspace/didChangeConfiguration",
            "params": {"settings": {"codespec": {"lookAheadKeys": keys}}},
        }
    )


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
