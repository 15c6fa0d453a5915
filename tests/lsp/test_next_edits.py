"""``textDocument/copilotInlineEdit`` over real JSON-RPC on the shared daemon (a tiny random
model: what it writes is noise, so these pin the protocol, not the edits; the embedded model's
are in ``tests/test_real_model.py``)."""

from __future__ import annotations

import pytest
from lsp_helpers import SOCKET
from rpc import did_open, folder_session

SOURCE = "def total(items):\n    subtotal = 0\n    for item in items:\n        count += item\n"
URI = "file:///tmp/next-edit/cart.py"


def change(version: int, line: int, character: int, text: str) -> dict:
    at = {"line": line, "character": character}
    return {
        "jsonrpc": "2.0",
        "method": "textDocument/didChange",
        "params": {
            "textDocument": {"uri": URI, "version": version},
            "contentChanges": [{"range": {"start": at, "end": at}, "text": text}],
        },
    }


def ask(client, msg_id, uri=URI, line=1, character=4, version=2) -> dict:
    client.send(
        {
            "jsonrpc": "2.0",
            "id": msg_id,
            "method": "textDocument/copilotInlineEdit",
            "params": {
                "textDocument": {"uri": uri, "version": version},
                "position": {"line": line, "character": character},
            },
        }
    )
    return client.reply_to(msg_id)


def test_a_next_edit_request_is_answered_with_edits_in_the_document(daemon):
    client = folder_session(SOCKET, [], {})
    client.send(did_open(URI, SOURCE))
    client.send(change(2, 1, 4, "sub"))  # an edit for the history
    client.sock.settimeout(120)
    reply = ask(client, "nes")
    edits = reply["result"]["edits"]
    lines = (SOURCE[:21] + "sub" + SOURCE[21:]).splitlines()
    for edit in edits:  # (whatever the random model wrote: well-formed, inside the window)
        assert isinstance(edit["text"], str)
        assert edit["textDocument"] == {"uri": URI, "version": 2}
        start, end = edit["range"]["start"], edit["range"]["end"]
        assert start["character"] == 0 and 0 <= start["line"] <= end["line"] <= len(lines)
    client.send({"jsonrpc": "2.0", "method": "textDocument/didShowInlineEdit", "params": {}})
    document = {"jsonrpc": "2.0", "id": "doc", "method": "codespec/document"}
    client.send({**document, "params": {"uri": URI}})
    assert client.reply_to("doc")["result"]["text"].startswith("def total")  # still serving


def test_next_edits_turned_off_answer_none_at_once(daemon):
    client = folder_session(SOCKET, [], {"nextEditSuggestions": False})
    client.send(did_open(URI, SOURCE))
    assert ask(client, 1)["result"] == {"edits": []}


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"textDocument": {"uri": URI}},
        {"textDocument": {"uri": 7}, "position": {"line": 0, "character": 0}},
        {"textDocument": {"uri": URI}, "position": {"line": "x", "character": 0}},
    ],
)
def test_a_malformed_request_is_invalid_params(daemon, params):
    client = folder_session(SOCKET, [], {})
    client.send(did_open(URI, SOURCE))
    client.send(
        {"jsonrpc": "2.0", "id": 5, "method": "textDocument/copilotInlineEdit", "params": params}
    )
    assert client.reply_to(5)["error"]["code"] == -32602


def test_a_document_that_is_not_open_is_invalid_params(daemon):
    client = folder_session(SOCKET, [], {})
    assert ask(client, 6, uri="file:///etc/passwd")["error"]["code"] == -32602
