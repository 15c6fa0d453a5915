"""The workspace drafter over real JSON-RPC against a real daemon (tiny model): a line that
another file of the folder holds is proposed from that file (the stats count the workspace
proposer's tokens), and an accepted completion is kept, as token ids, in the state directory,
unless the session turned workspace context off."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from lsp_helpers import start_daemon
from rpc import RawClient, did_open, folder_session

from codespec.workspace.accepted import FILE_NAME, read_records

OPTIONS = {"stopRules": False, "maxTokens": 8, "warmAhead": False}
# what main.py's last line holds so far: ending on a whole token (a trailing space would be
# a token the file never holds, and the lookup would start only after the model's first tokens)
TYPED = "    result = configure_pipeline(stage_alpha,"
MAIN = "from lib import configure_pipeline\n\n\ndef run(stage_alpha, stage_beta):\n" + TYPED


@pytest.fixture
def drafter_daemon(tiny_manifest, tmp_path):
    socket_path = tmp_path / "d.sock"
    db = tmp_path / "state" / "stats.sqlite3"
    # a pass priced as a real model's would be: speculation pays (as in the shared daemon)
    proc = start_daemon(
        tiny_manifest,
        "--stats-db",
        str(db),
        "--test-pass-delay",
        "0.02",
        socket_path=socket_path,
    )
    yield socket_path, db.parent / FILE_NAME
    proc.terminate()
    proc.wait(timeout=30)


def session(socket_path, folder: Path | None, options: dict = OPTIONS) -> RawClient:
    return folder_session(socket_path, [folder.as_uri()] if folder else [], options)


def ask(client: RawClient, uri: str, text: str, msg_id: str) -> dict:
    lines = text.split("\n")
    client.send(
        {
            "jsonrpc": "2.0",
            "id": msg_id,
            "method": "textDocument/inlineCompletion",
            "params": {
                "textDocument": {"uri": uri},
                "position": {"line": len(lines) - 1, "character": len(lines[-1])},
                "context": {"triggerKind": 1},
            },
        }
    )
    return client.reply_to(msg_id)["result"]


def workspace_counts(client: RawClient) -> tuple[int, int]:
    """The workspace drafter's (proposed, accepted) tokens so far, from the daemon's stats."""
    client.send({"jsonrpc": "2.0", "id": "st", "method": "codespec/stats", "params": {}})
    groups = client.reply_to("st")["result"].get("groups", [])
    return (
        sum(g["workspace"]["proposed"] for g in groups),
        sum(g["workspace"]["accepted"] for g in groups),
    )


def request_count(client: RawClient) -> int:
    """The requests the daemon's stats hold so far."""
    client.send({"jsonrpc": "2.0", "id": "rq", "method": "codespec/stats", "params": {}})
    return client.reply_to("rq")["result"]["total"]["requests"]


def accept_one(client: RawClient, uri: str, text: str, msg_id: str) -> None:
    """Ask at the end of ``text``, insert the suggestion as an editor does, run its command."""
    items = ask(client, uri, text, msg_id)["items"]
    assert items and items[0]["insertText"], "the tiny model gave no text here"
    client.send(
        {
            "jsonrpc": "2.0",
            "method": "textDocument/didChange",
            "params": {
                "textDocument": {"uri": uri, "version": 2},
                "contentChanges": [{"text": text + items[0]["insertText"]}],
            },
        }
    )
    command = items[0]["command"]
    client.send(
        {
            "jsonrpc": "2.0",
            "id": msg_id + "-accept",
            "method": "workspace/executeCommand",
            "params": {"command": command["command"], "arguments": command["arguments"]},
        }
    )
    assert "error" not in client.reply_to(msg_id + "-accept")


def wait_for(condition, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def test_the_folder_drafts_and_accepted_completions_are_kept(drafter_daemon, tmp_path):
    socket_path, accepted_file = drafter_daemon
    project = tmp_path / "project"
    project.mkdir()
    main = project / "main.py"
    main.write_text(MAIN, encoding="utf-8")

    # What the (random) model writes at main.py's cursor, asked without the folder: another
    # file of the folder that holds it lets the drafter propose the model's own next tokens
    lone = session(socket_path, None)
    lone.send(did_open(main.as_uri(), MAIN))
    [item] = ask(lone, main.as_uri(), MAIN, "alone")["items"]
    (project / "lib.py").write_text(MAIN + item["insertText"] + "\n", encoding="utf-8")

    client = session(socket_path, project)
    client.send(did_open(main.as_uri(), MAIN))
    deadline = time.monotonic() + 120  # the folder is indexed in the background (CI is slow)
    n = 0
    while workspace_counts(client)[0] == 0:
        assert time.monotonic() < deadline, "the workspace drafter never proposed lib.py's text"
        ask(client, main.as_uri(), MAIN, f"q{(n := n + 1)}")
        time.sleep(0.2)
    proposed, accepted = workspace_counts(client)
    assert 0 < accepted <= proposed  # greedy: the model's own tokens are accepted

    accept_one(client, main.as_uri(), MAIN, "take")
    wait_for(lambda: len(read_records(accepted_file)) == 1, "the accepted completion not kept")
    kept = accepted_file.read_bytes()

    # a session with workspace context off neither learns nor drafts from the folder
    other = tmp_path / "other.py"
    off = session(socket_path, project, {**OPTIONS, "workspaceContext": False})
    off.send(did_open(other.as_uri(), MAIN))
    requests, before = request_count(off), workspace_counts(off)
    accept_one(off, other.as_uri(), MAIN, "off")  # (answered before the next is sent)
    # its request's stats row is in once the request count moves: then nothing was drafted
    wait_for(lambda: request_count(off) > requests, "the off session's request not recorded")
    assert workspace_counts(off) == before
    # Positive control, in the same order: the session with the context on keeps its accepted
    # completion; once that one is on disk, one the other session's accept had made would be
    # too (both go through the daemon's one writer, the off session's first).
    again = project / "again.py"  # (a fresh document, as the off session's is)
    client.send(did_open(again.as_uri(), MAIN))
    accept_one(client, again.as_uri(), MAIN, "take-again")
    wait_for(lambda: len(read_records(accepted_file)) >= 2, "the second accept not kept")
    records = read_records(accepted_file)
    assert len(records) == 2 and accepted_file.read_bytes().startswith(kept)
