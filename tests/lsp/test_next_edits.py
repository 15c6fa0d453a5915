"""``textDocument/copilotInlineEdit`` over real JSON-RPC on the shared daemon (a tiny random
model: what it writes is noise, so these pin the protocol, not the edits; the embedded model's
are in ``tests/test_real_model.py``). The documents are plain text: noise in a Python file is
a broken file, which the guard never shows (``nextedit/guard.py``, ``test_nextedit_guard.py``)."""

from __future__ import annotations

import pytest
from lsp_helpers import SOCKET
from rpc import did_open, folder_session, unix_client

SOURCE = "def total(items):\n    subtotal = 0\n    for item in items:\n        count += item\n"
URI = "file:///tmp/next-edit/cart.txt"


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


def next_edit_counts(client) -> tuple[int, int, int]:
    """(shown, accepted, rejected) of the daemon's next edits so far."""
    client.send(
        {"jsonrpc": "2.0", "id": "st", "method": "codespec/stats", "params": {"by": "kind"}}
    )
    result = client.reply_to("st")["result"]
    groups = {g["key"]: g for g in result["groups"]}
    group = groups.get("next-edit/invoked", {})
    return group.get("shown", 0), group.get("accepted", 0), group.get("rejected", 0)


def asked_edit(client) -> dict:
    """The one edit a fresh session's request is answered with (eagerness high: the random
    model's noise is shown whatever its probabilities)."""
    client.send(did_open(URI, SOURCE, "plaintext"))
    client.send(change(2, 1, 4, "sub"))  # an edit for the history
    client.sock.settimeout(120)
    edits = ask(client, "nes")["result"]["edits"]
    assert len(edits) == 1, edits  # (an answer's edits are alternatives: codespec sends one)
    return edits[0]


def test_a_next_edit_is_one_edit_of_whole_lines_whose_accept_reaches_the_stats(daemon):
    client = folder_session(SOCKET, [], {"nextEditEagerness": "high"})
    before = next_edit_counts(client)
    edit = asked_edit(client)
    lines = (SOURCE[:21] + "sub" + SOURCE[21:]).splitlines()
    assert isinstance(edit["text"], str) and edit["textDocument"] == {"uri": URI, "version": 2}
    start, end = edit["range"]["start"], edit["range"]["end"]
    assert start["character"] == 0 and 0 <= start["line"] <= end["line"] <= len(lines)
    command = edit["command"]
    assert command["command"] == "codespec.didAccept" and len(command["arguments"]) == 1
    shown = {"item": {"command": command}}
    client.send({"jsonrpc": "2.0", "method": "textDocument/didShowInlineEdit", "params": shown})
    # the user takes it: the client applies the edit (its command comes after; the verdict
    # from the document is already there, and an explicit one for it changes nothing)
    client.send(
        {
            "jsonrpc": "2.0",
            "method": "textDocument/didChange",
            "params": {
                "textDocument": {"uri": URI, "version": 3},
                "contentChanges": [{"range": edit["range"], "text": edit["text"]}],
            },
        }
    )
    client.send(
        {
            "jsonrpc": "2.0",
            "id": "cmd",
            "method": "workspace/executeCommand",
            "params": {"command": command["command"], "arguments": command["arguments"]},
        }
    )
    assert client.reply_to("cmd")["result"] is None
    shown_n, accepted, rejected = next_edit_counts(client)
    assert (shown_n, accepted, rejected) == (before[0] + 1, before[1] + 1, before[2])


def test_a_dismissed_next_edit_counts_as_rejected(daemon):
    client = folder_session(SOCKET, [], {"nextEditEagerness": "high"})
    before = next_edit_counts(client)
    edit = asked_edit(client)
    dismiss = {"command": "codespec.didDismiss", "arguments": edit["command"]["arguments"]}
    command = {"jsonrpc": "2.0", "id": "d", "method": "workspace/executeCommand"}
    client.send({**command, "params": dismiss})
    assert client.reply_to("d")["result"] is None
    shown, accepted, rejected = next_edit_counts(client)
    assert (shown, accepted, rejected) == (before[0] + 1, before[1], before[2] + 1)


def test_an_edit_the_model_is_not_sure_of_is_held_back(daemon):
    """The random model's noise has low probabilities: at the default eagerness it is not
    shown (at ``high`` the same request draws an edit, above)."""
    client = folder_session(SOCKET, [], {})
    client.send(did_open(URI, SOURCE, "plaintext"))
    client.send(change(2, 1, 4, "sub"))
    client.sock.settimeout(120)
    assert ask(client, "nes")["result"] == {"edits": []}
    client.send({"jsonrpc": "2.0", "method": "textDocument/didShowInlineEdit", "params": {}})
    document = {"jsonrpc": "2.0", "id": "doc", "method": "codespec/document"}
    client.send({**document, "params": {"uri": URI}})
    assert client.reply_to("doc")["result"]["text"].startswith("def total")  # still serving


def test_next_edits_turned_off_answer_none_at_once(daemon):
    client = folder_session(SOCKET, [], {"nextEditSuggestions": False})
    client.send(did_open(URI, SOURCE, "plaintext"))
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
    client.send(did_open(URI, SOURCE, "plaintext"))
    client.send(
        {"jsonrpc": "2.0", "id": 5, "method": "textDocument/copilotInlineEdit", "params": params}
    )
    assert client.reply_to(5)["error"]["code"] == -32602


def test_a_document_that_is_not_open_is_invalid_params(daemon):
    client = folder_session(SOCKET, [], {})
    assert ask(client, 6, uri="file:///etc/passwd")["error"]["code"] == -32602


def test_hostile_documents_are_answered_at_once(daemon):
    """A line longer than any window (minified code), and a long file of repeated lines whose
    every line the session changed: no edit, answered at once (nothing to rewrite, and no
    line-by-line diff of the whole file), and the daemon serves on."""
    client = folder_session(SOCKET, [], {"nextEditEagerness": "high"})
    client.sock.settimeout(60)
    minified = "var a=" + "1+" * 200_000 + "1;\n"
    client.send(did_open("file:///tmp/next-edit/min.js", minified))
    ask_min = ask(client, "min", uri="file:///tmp/next-edit/min.js", line=0, character=5)
    assert ask_min["result"] == {"edits": []}
    uri = "file:///tmp/next-edit/braces.go"
    braces = "".join("}\n" if i % 3 == 0 else f"\tx{i % 7} = {i % 5}\n" for i in range(30_000))
    client.send(did_open(uri, braces))
    whole = braces.replace("\tx", "\ty")  # (one change: the whole text)
    client.send(
        {
            "jsonrpc": "2.0",
            "method": "textDocument/didChange",
            "params": {
                "textDocument": {"uri": uri, "version": 2},
                "contentChanges": [{"text": whole}],
            },
        }
    )
    reply = ask(client, "braces", uri=uri, line=15_000, character=1)
    assert "result" in reply and len(reply["result"]["edits"]) <= 1
    document = {"jsonrpc": "2.0", "id": "doc", "method": "codespec/document"}
    client.send({**document, "params": {"uri": uri}})
    assert client.reply_to("doc")["result"]["text"] == whole


# copilot-lsp's stock configuration (``lsp/copilot.lua``), as Copilot's language server reads it
COPILOT_INIT_OPTIONS = {
    "editorInfo": {"name": "neovim", "version": "0.11"},
    "editorPluginInfo": {"name": "Github Copilot LSP for Neovim", "version": "0.0.1"},
}


def messages_until_reply(client, msg_id) -> list[dict]:
    """Every message up to and including the reply to ``msg_id`` (notifications kept)."""
    seen = []
    while True:
        message = client.read()
        assert message is not None, "connection closed"
        seen.append(message)
        if message.get("id") == msg_id and "method" not in message:
            return seen


def warnings_for(client, settings: dict, msg_id: str) -> list[str]:
    """The messages the daemon shows the user after ``settings`` arrive as copilot-lsp sends
    them (``workspace/didChangeConfiguration``), read up to a request's reply."""
    client.send(
        {
            "jsonrpc": "2.0",
            "method": "workspace/didChangeConfiguration",
            "params": {"settings": settings},
        }
    )
    client.send({"jsonrpc": "2.0", "id": msg_id, "method": "codespec/stats", "params": {}})
    shown = [m for m in messages_until_reply(client, msg_id) if m.get("method")]
    return [m["params"]["message"] for m in shown if m["method"] == "window/showMessage"]


def test_copilot_lsps_stock_configuration_draws_no_warning_and_is_obeyed(daemon):
    """copilot-lsp's ``init_options`` (``editorInfo``, ``editorPluginInfo``) and its settings
    (``nextEditSuggestions: {enabled}``, ``telemetry``) as Copilot's language server takes
    them: no warning, and ``enabled = false`` turns next edits off."""
    client = unix_client(SOCKET)
    client.send(
        {
            "jsonrpc": "2.0",
            "id": "init",
            "method": "initialize",
            "params": {
                "processId": None,
                "capabilities": {},
                "clientInfo": {"name": "Neovim", "version": "0.11.4"},
                "initializationOptions": COPILOT_INIT_OPTIONS,
            },
        }
    )
    at_start = [m for m in messages_until_reply(client, "init") if m.get("method")]
    assert [m for m in at_start if m["method"] == "window/showMessage"] == []
    client.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
    stock = {"nextEditSuggestions": {"enabled": True}, "telemetry": {"telemetryLevel": "off"}}
    assert warnings_for(client, stock, "s1") == []
    # (positive control: a setting codespec does not know is one warning, read the same way)
    assert len(warnings_for(client, {"nextEditSugestions": True}, "s2")) == 1
    # on (and eager: the random model's noise is shown), an edit comes; off, none
    assert warnings_for(client, {"nextEditEagerness": "high"}, "s3") == []
    client.send(did_open(URI, SOURCE, "plaintext"))
    client.send(change(2, 1, 4, "sub"))
    client.sock.settimeout(120)
    assert len(ask(client, "on")["result"]["edits"]) == 1
    assert warnings_for(client, {"nextEditSuggestions": {"enabled": False}}, "s4") == []
    assert ask(client, "off", version=2)["result"] == {"edits": []}
