"""A team server that accepts connections and never answers, or answers ``/health`` but never a
completion, against eight editors on one daemon: after the first few requests every request
is answered at once, the status says why, and the server is taken back once it serves again."""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from remote_helpers import daemon_on_a_remote_engine, needs_server

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lsp"))
from rpc import did_open, inline_request, unix_client  # noqa: E402

pytestmark = needs_server
EDITORS = 8
TEXT = "def add(a, b):\n    return "
FIRST_FEW = 16  # requests (of all editors, in the order they were sent) that may still wait
ANSWERED_AT_ONCE_S = 0.2


def session(socket_path: Path):
    """An editor's session on the daemon (stop rules off: the random model never ends a line,
    and a line cut at the limit would be shown as nothing)."""
    client = unix_client(socket_path)
    options = {"stopRules": False}
    client.send(
        {
            "jsonrpc": "2.0",
            "id": "init",
            "method": "initialize",
            "params": {"capabilities": {}, "processId": None, "initializationOptions": options},
        }
    )
    assert "result" in client.reply_to("init")
    client.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
    return client


def shown(reply: dict) -> bool:
    result = reply.get("result")
    items = result.get("items") if isinstance(result, dict) else result
    return bool(items) and any(item.get("insertText") for item in items)


def editor(socket_path: Path, number: int, seconds: float, timings: list, statuses: list) -> None:
    """One editor asking a completion back to back for ``seconds``: (sent, waited) of each."""
    client = session(socket_path)
    uri = f"file:///tmp/stuck_{number}.py"
    client.send(did_open(uri, TEXT))
    end, msg_id = time.monotonic() + seconds, 100
    while time.monotonic() < end:
        msg_id += 1
        sent = time.monotonic()
        client.send(inline_request(msg_id, uri, 1, 11))
        while True:
            message = client.read(timeout=60)
            assert message is not None, "the daemon closed the session"
            if message.get("method") == "codespec/status":
                statuses.append(message["params"])
            elif message.get("id") == msg_id and "method" not in message:
                break
        timings.append((sent, time.monotonic() - sent))
    client.sock.close()


@pytest.mark.parametrize("mode", ["stall", "busy"])
def test_eight_editors_against_a_stuck_server_are_answered_at_once(tiny_manifest, mode):
    """``stall``: accepts, answers nothing at all; ``busy``: answers every GET (``/health``,
    ``/v1/models``) but never a completion. Either way, once the daemon has seen it (a few
    requests) it is down: requests wait on it no more, backoff or not, and every editor's
    status says why; when it serves again a probe takes it back without a request."""
    folder = Path(tempfile.mkdtemp(prefix="codespec-stuck-"))
    with daemon_on_a_remote_engine(tiny_manifest, folder, "--max-tokens", "8") as running:
        _, proxy, socket_path = running
        proxy.mode = mode
        timings: list[tuple[float, float]] = []
        statuses: list[dict] = []
        editors = [
            threading.Thread(target=editor, args=(socket_path, i, 30.0, timings, statuses))
            for i in range(EDITORS)
        ]
        for thread in editors:
            thread.start()
        for thread in editors:
            thread.join(timeout=120)
        ordered = [waited for _, waited in sorted(timings)]
        later = ordered[FIRST_FEW:]
        assert len(later) > 100, ordered[:40]  # (at once: many more than the slow ones)
        print(  # (seen with -s: the figures the note on this shape quotes)
            f"{mode}: {len(ordered)} requests; first {FIRST_FEW} waited "
            f"{[round(w, 1) for w in ordered[:FIRST_FEW]]} s; the rest at most "
            f"{max(later) * 1000:.0f} ms, median {sorted(later)[len(later) // 2] * 1000:.0f} ms"
        )
        slow = [round(w, 2) for w in later if w > ANSWERED_AT_ONCE_S]
        assert not slow, (slow, [round(w, 2) for w in ordered[:FIRST_FEW]])
        down = [s for s in statuses if s.get("state") == "remote unreachable"]
        assert down, statuses[-3:]
        reason = "no answer to a probe" if mode == "stall" else "answers probes but sent no"
        assert reason in down[-1].get("message", ""), down[-1]

        proxy.mode = "pass"  # it serves again: the probe finds it, no request needed
        client = session(socket_path)
        client.send(did_open("file:///tmp/stuck_back.py", TEXT))
        deadline, back = time.monotonic() + 30, False
        msg_id = 200
        while time.monotonic() < deadline and not back:
            msg_id += 1
            client.send(inline_request(msg_id, "file:///tmp/stuck_back.py", 1, 11))
            reply = client.reply_to(msg_id)
            back = shown(reply)
            time.sleep(0.5)
        assert back, "the server serves again, but requests are still answered empty"
