"""Next edits through a team server (issue 53, item 9): `codespec serve --engine URL` writes the
updated window on a real llama-cpp-python server (a tiny random GGUF), with the same prompt,
stops and edits as the local engine; over real JSON-RPC. The document is plain text: the random
model's noise in a Python file is a broken file, which the guard never shows
(``nextedit/guard.py``)."""

from __future__ import annotations

import sys
from pathlib import Path

from remote_helpers import daemon_on_a_remote_engine, needs_server

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lsp"))
from rpc import did_open, folder_session  # noqa: E402

pytestmark = [needs_server]
URI = "file:///tmp/remote-next-edit/cart.txt"
SOURCE = "def total(items):\n    count = 0\n    for item in items:\n        count += item\n"


def test_a_next_edit_is_written_on_the_remote_engine(tiny_manifest, tmp_path):
    with daemon_on_a_remote_engine(tiny_manifest, tmp_path) as (daemon, proxy, socket_path):
        # (at ``high`` an edit need not follow from the recent ones: noise may be shown)
        client = folder_session(socket_path, [], {"nextEditEagerness": "high"})
        shown_before = next_edits_shown(client)
        client.send(did_open(URI, SOURCE, "plaintext"))
        at = {"line": 1, "character": 4}
        change = {"range": {"start": at, "end": at}, "text": "sub"}
        client.send(
            {
                "jsonrpc": "2.0",
                "method": "textDocument/didChange",
                "params": {"textDocument": {"uri": URI, "version": 2}, "contentChanges": [change]},
            }
        )
        client.sock.settimeout(120)
        client.send(
            {
                "jsonrpc": "2.0",
                "id": "nes",
                "method": "textDocument/copilotInlineEdit",
                "params": {"textDocument": {"uri": URI, "version": 2}, "position": at},
            }
        )
        edits = client.reply_to("nes")["result"]["edits"]
        # (the server reports no probabilities: every edit counts as sure; the random model's
        # text differs from the window, so there is one)
        assert len(edits) == 1, edits
        edit = edits[0]
        assert edit["range"]["start"]["character"] == 0 and edit["command"]["arguments"]
        assert proxy.connections >= 1  # (written there, not here)
        assert next_edits_shown(client) == shown_before + 1  # (the store may hold older rows)
        assert daemon.poll() is None


def next_edits_shown(client) -> int:
    client.send(
        {"jsonrpc": "2.0", "id": "st", "method": "codespec/stats", "params": {"by": "kind"}}
    )
    groups = {g["key"]: g for g in client.reply_to("st")["result"]["groups"]}
    return groups.get("next-edit/invoked", {}).get("shown", 0)
