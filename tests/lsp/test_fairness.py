"""One busy session must not stall the others (lsp/PROTOCOL.md, "Scheduling"): a request that
would run long (no stop rules, the largest token limit the settings allow) yields the worker
after its share while another session's request waits, and is answered with what it has."""

from __future__ import annotations

import time

from lsp_helpers import SOCKET
from rpc import did_open, inline_request, unix_client

from codespec.server.worker import JOB_SHARE_S


def session(settings: dict):
    client = unix_client(SOCKET)
    client.send(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"capabilities": {}, "processId": None, "initializationOptions": settings},
        }
    )
    assert "capabilities" in client.reply_to(1)["result"]
    client.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
    return client


def test_a_long_request_yields_to_another_sessions_request(daemon):
    hog = session({"stopRules": False, "maxTokens": 1024, "speculate": False, "warmAhead": False})
    hog.send(did_open("file:///tmp/hog.py", "def long(x):\n    \n"))
    hog.send(inline_request(2, "file:///tmp/hog.py", 1, 4))
    hog_asked = time.monotonic()
    time.sleep(1.0)  # the hog's request is running (1024 tokens at the daemon's pass delay)
    other = session({"warmAhead": False})
    other.send(did_open("file:///tmp/other.py", "def short(y):\n    \n"))
    asked = time.monotonic()
    other.send(inline_request(2, "file:///tmp/other.py", 1, 4))
    assert "result" in other.reply_to(2)
    waited = time.monotonic() - asked
    assert waited < JOB_SHARE_S + 5, waited  # not the hog's whole 1024 tokens
    hogged = hog.reply_to(2)  # answered with what it had when its share ran out
    assert "items" in hogged["result"] and time.monotonic() - hog_asked < JOB_SHARE_S + 10
    hog.send({"jsonrpc": "2.0", "id": 3, "method": "codespec/stats", "params": {}})
    assert hog.reply_to(3)["result"]["daemon"]["yielded"] >= 1


def test_a_long_request_alone_is_not_cut(daemon):
    """With nobody else waiting, the share does not apply: the request runs to its limit."""
    alone = session({"stopRules": False, "maxTokens": 300, "speculate": False, "warmAhead": False})
    alone.send(did_open("file:///tmp/alone.py", "def alone(x):\n    \n"))
    alone.send({"jsonrpc": "2.0", "id": 9, "method": "codespec/stats", "params": {}})
    before = alone.reply_to(9)["result"]["daemon"]["yielded"]
    alone.send(inline_request(2, "file:///tmp/alone.py", 1, 4))
    assert "result" in alone.reply_to(2)
    alone.send({"jsonrpc": "2.0", "id": 3, "method": "codespec/stats", "params": {}})
    assert alone.reply_to(3)["result"]["daemon"]["yielded"] == before


def test_costly_edits_in_one_session_do_not_hold_another(daemon):
    """60 keystrokes at column 900,000 of a 1 MB line, then one didChange of 5,000 edits to a
    180 KB document: another session's request is still answered within a bound (these took
    32 s and 46 s of the shared event loop when an edit cost its line or its document)."""
    from rpc import did_open as opened

    editor = session({"warmAhead": False})
    editor.send(opened("file:///tmp/min.js", "a\n" + "x" * 1_000_000 + "\n"))
    for i in range(60):
        at = {"line": 1, "character": 900_000 + i}
        editor.send(
            {
                "jsonrpc": "2.0",
                "method": "textDocument/didChange",
                "params": {
                    "textDocument": {"uri": "file:///tmp/min.js", "version": i + 2},
                    "contentChanges": [{"range": {"start": at, "end": at}, "text": "y"}],
                },
            }
        )
    lines = "".join(f"value_{i} = {i}\n" for i in range(12_000))[:180_000]
    editor.send(opened("file:///tmp/big.py", lines))
    changes = [
        {
            "range": {"start": {"line": i, "character": 0}, "end": {"line": i, "character": 0}},
            "text": "z",
        }
        for i in range(5_000)
    ]
    editor.send(
        {
            "jsonrpc": "2.0",
            "method": "textDocument/didChange",
            "params": {
                "textDocument": {"uri": "file:///tmp/big.py", "version": 2},
                "contentChanges": changes,
            },
        }
    )
    other = session({"warmAhead": False})
    other.send(did_open("file:///tmp/quick.py", "def quick(z):\n    \n"))
    asked = time.monotonic()
    other.send(inline_request(2, "file:///tmp/quick.py", 1, 4))
    assert "result" in other.reply_to(2)
    assert time.monotonic() - asked < 15
    editor.send(
        {
            "jsonrpc": "2.0",
            "id": 5,
            "method": "codespec/document",
            "params": {"uri": "file:///tmp/min.js"},
        }
    )
    text = editor.reply_to(5)["result"]["text"]
    assert text[2 + 900_000 : 2 + 900_060] == "y" * 60


def test_a_costly_edit_message_is_applied_off_the_event_loop(daemon):
    """One didChange of 10,000 edits to a 300 KB document (each edit copies the document): the
    daemon applies it on a thread, so another session is answered meanwhile; the editing session's
    next request still sees every edit (nothing of it overtakes the message)."""
    editor = session({"warmAhead": False})
    lines = "".join(f"value_{i} = {i}\n" for i in range(20_000))[:300_000]
    uri = "file:///tmp/costly.py"
    editor.send(did_open(uri, lines))
    edits = 10_000
    changes = [
        {
            "range": {"start": {"line": i, "character": 0}, "end": {"line": i, "character": 0}},
            "text": "z",
        }
        for i in range(edits)
    ]
    other = session({"warmAhead": False})
    other.send(did_open("file:///tmp/small.py", "x = 1\n"))
    document = {"jsonrpc": "2.0", "method": "codespec/document"}
    sent = time.monotonic()
    editor.send(
        {
            "jsonrpc": "2.0",
            "method": "textDocument/didChange",
            "params": {"textDocument": {"uri": uri, "version": 2}, "contentChanges": changes},
        }
    )
    editor.send({**document, "id": 7, "params": {"uri": uri}})
    time.sleep(0.2)  # the edits are being applied
    asked = time.monotonic()
    other.send({**document, "id": 8, "params": {"uri": "file:///tmp/small.py"}})
    assert other.reply_to(8)["result"]["text"] == "x = 1\n"
    other_waited = time.monotonic() - asked
    text = editor.reply_to(7)["result"]["text"]
    applied_in = time.monotonic() - sent
    expected = lines.split("\n")
    expected[:edits] = ["z" + line for line in expected[:edits]]
    assert text == "\n".join(expected)
    print(f"applied in {applied_in:.2f} s; the other session waited {other_waited:.3f} s")
    # (meaningful only while applying the message takes far longer than serving the other)
    assert applied_in > 4 * other_waited, (applied_in, other_waited)
    assert other_waited < 1.0, (applied_in, other_waited)
