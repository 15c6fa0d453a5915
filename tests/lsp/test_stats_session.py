"""Acceptance stats end to end: scripted editing sessions over real JSON-RPC against a real
daemon (tiny model), then `codespec/stats` and `codespec stats --json` from the store."""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys

import pytest
from lsp_helpers import start_daemon
from rpc import RawClient, unix_client

OPTIONS = {"stopRules": False, "maxTokens": 8, "warmAhead": False}
DOCS = {
    "python": ("file:///work/a.py", "def f(x):\n    y = x\n"),
    "go": ("file:///work/b.go", "package main\n\nfunc f() int {\n\treturn 1\n}\n"),
}


class Editor:
    """A scripted editor: whole-text didChange, requests at the end of the document."""

    def __init__(self, client: RawClient, language: str, reports_verdicts: bool) -> None:
        self.client = client
        self.uri, self.text = DOCS[language]
        self.version = 1
        self.reports = reports_verdicts
        self.ids = iter(range(10_000))
        client.send(
            {
                "jsonrpc": "2.0",
                "method": "textDocument/didOpen",
                "params": {
                    "textDocument": {
                        "uri": self.uri,
                        "languageId": language,
                        "version": 1,
                        "text": self.text,
                    }
                },
            }
        )

    def edit(self, text: str) -> None:
        self.text = text
        self.version += 1
        self.client.send(
            {
                "jsonrpc": "2.0",
                "method": "textDocument/didChange",
                "params": {
                    "textDocument": {"uri": self.uri, "version": self.version},
                    "contentChanges": [{"text": text}],
                },
            }
        )

    def suggest(self) -> tuple[str, str]:
        """A new line at the end, an invoked request there: (text, id) of the suggestion."""
        self.edit(self.text + "\n")
        lines = self.text.split("\n")
        msg_id = f"req{next(self.ids)}-{self.uri}"
        self.client.send(
            {
                "jsonrpc": "2.0",
                "id": msg_id,
                "method": "textDocument/inlineCompletion",
                "params": {
                    "textDocument": {"uri": self.uri},
                    "position": {"line": len(lines) - 1, "character": len(lines[-1])},
                    "context": {"triggerKind": 1},
                },
            }
        )
        items = self.client.reply_to(msg_id)["result"]["items"]
        assert items and items[0]["insertText"], "the tiny model gave no text here"
        command = items[0]["command"]
        assert command["command"] == "codespec.didAccept" and len(command["arguments"]) == 1
        return items[0]["insertText"], command["arguments"][0]

    def command(self, name: str, *arguments) -> None:
        msg_id = f"cmd{next(self.ids)}"
        self.client.send(
            {
                "jsonrpc": "2.0",
                "id": msg_id,
                "method": "workspace/executeCommand",
                "params": {"command": name, "arguments": list(arguments)},
            }
        )
        assert "error" not in self.client.reply_to(msg_id)

    # -- what a user does with a suggestion -------------------------------------------------

    def show(self, sid: str) -> None:
        if self.reports:
            self.command("codespec.didShow", sid)

    def accept(self) -> None:
        text, sid = self.suggest()
        self.show(sid)
        self.edit(self.text + text)  # the editor inserts it ...
        self.command("codespec.didAccept", sid)  # ... and runs the item's command

    def accept_part(self, chars: int) -> None:
        text, sid = self.suggest()
        assert len(text) > chars
        self.show(sid)
        self.edit(self.text + text[:chars])  # accept-word
        if self.reports:
            self.command("codespec.didPartialAccept", sid, chars)
        self.type_over(text[chars:])

    def type_over(self, suggestion_rest: str | None = None) -> None:
        if suggestion_rest is None:
            suggestion_rest, sid = self.suggest()
            self.show(sid)
        self.edit(self.text + ("Q" if not suggestion_rest.startswith("Q") else "W"))

    def dismiss(self) -> None:
        text, sid = self.suggest()
        self.show(sid)
        if self.reports:
            self.command("codespec.didDismiss", sid)
        else:
            self.type_over(text)  # a generic client: the user just types on

    def ignore_unshown(self) -> None:
        self.suggest()  # answered but never displayed (the user typed on meanwhile)


def stats_request(client: RawClient, params: dict) -> dict:
    client.send({"jsonrpc": "2.0", "id": "stats", "method": "codespec/stats", "params": params})
    reply = client.reply_to("stats")
    assert "result" in reply, reply
    return reply["result"]


def by_language(report: dict) -> dict:
    return {
        g["key"]: (g["shown"], g["accepted"], g["partial"], g["rejected"]) for g in report["groups"]
    }


@pytest.fixture
def stats_daemon(tiny_manifest, tmp_path):
    socket_path = tmp_path / "d.sock"
    db = tmp_path / "stats.sqlite3"
    proc = start_daemon(tiny_manifest, "--stats-db", str(db), socket_path=socket_path)
    yield proc, socket_path, db
    if proc.poll() is None:
        proc.terminate()
        proc.wait(timeout=30)


def session(socket_path, reports_verdicts: bool) -> RawClient:
    client = unix_client(socket_path)
    capabilities = {"experimental": {"codespecVerdicts": True}} if reports_verdicts else {}
    client.send(
        {
            "jsonrpc": "2.0",
            "id": "init",
            "method": "initialize",
            "params": {"capabilities": capabilities, "initializationOptions": OPTIONS},
        }
    )
    reply = client.reply_to("init")["result"]
    commands = reply["capabilities"]["executeCommandProvider"]["commands"]
    assert {"codespec.didShow", "codespec.didAccept", "codespec.didPartialAccept"} <= set(commands)
    client.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
    return client


def stats_cli(db, *args) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "codespec", "stats", "--db", str(db), "--json", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_a_plugin_session_is_counted_exactly(stats_daemon):
    """A client that reports every verdict: shown, accepted, partially accepted, dismissed;
    typed-over suggestions are inferred; one answered but never shown is not counted."""
    proc, socket_path, db = stats_daemon
    client = session(socket_path, reports_verdicts=True)
    python = Editor(client, "python", reports_verdicts=True)
    go = Editor(client, "go", reports_verdicts=True)
    for step in (python.accept, python.accept, go.accept):
        step()
    python.accept_part(1)
    go.accept_part(2)
    go.accept_part(1)
    python.type_over()
    go.type_over()
    go.type_over()
    python.dismiss()
    python.ignore_unshown()
    go.ignore_unshown()
    python.command("codespec.didAccept", "0123456789abcdef")  # unknown id: ignored, no error
    python.command("codespec.didPartialAccept")  # no arguments: ignored
    expected = {"python": (5, 2, 1, 2), "go": (5, 1, 2, 2)}  # shown, accepted, partial, rejected
    live = stats_request(client, {})
    assert by_language(live) == expected
    assert live["total"]["suggestions"] == 12 and live["store"]["status"] == "file"
    python_group = next(g for g in live["groups"] if g["key"] == "python")
    assert python_group["partial"] == 1 and python_group["accepted_chars"] > 1
    assert python_group["latency_ms"]["total_ms"]["n"] >= 6
    assert python_group["tokens_per_pass"] and python_group["tokens"] > 0
    only_go = stats_request(client, {"language": "go", "by": "kind"})
    assert only_go["total"]["shown"] == 5 and only_go["filters"]["by"] == "kind"
    assert all(g["key"].endswith("/invoked") for g in only_go["groups"])
    client.send({"jsonrpc": "2.0", "id": "bad", "method": "codespec/stats", "params": {"by": 3}})
    assert client.reply_to("bad")["error"]["code"] == -32602
    proc.terminate()
    proc.wait(timeout=30)
    assert by_language(stats_cli(db)) == expected


def test_a_generic_client_is_counted_through_the_item_command_alone(stats_daemon):
    """No codespec-specific events: accepts come from the items' command (and the edit),
    everything answered counts as shown, typing on rejects."""
    proc, socket_path, db = stats_daemon
    client = session(socket_path, reports_verdicts=False)
    python = Editor(client, "python", reports_verdicts=False)
    go = Editor(client, "go", reports_verdicts=False)
    python.accept()
    go.accept()
    go.accept()
    python.type_over()
    python.type_over()
    go.dismiss()
    python.accept()
    live = stats_request(client, {})
    expected = {"python": (4, 2, 0, 2), "go": (3, 2, 0, 1)}
    assert by_language(live) == expected
    client.send({"jsonrpc": "2.0", "id": "down", "method": "shutdown"})
    client.reply_to("down")
    client.send({"jsonrpc": "2.0", "method": "exit"})
    proc.terminate()
    proc.wait(timeout=30)
    assert by_language(stats_cli(db)) == expected
    assert stats_cli(db, "--language", "go")["total"]["accepted"] == 2


def test_kill_9_while_recording_loses_nothing_committed(tiny_manifest, tmp_path):
    """Rounds of: a daemon records a stream of suggestions and shows, a `codespec/stats`
    reply now and then acknowledges what was committed, then kill -9 at a random moment. The
    file opens every time and holds each acknowledged event exactly once."""
    db = tmp_path / "stats.sqlite3"
    acknowledged: set[str] = set()
    for round_number in range(4):
        socket_path = tmp_path / f"round{round_number}.sock"
        proc = start_daemon(tiny_manifest, "--stats-db", str(db), socket_path=socket_path)
        client = session(socket_path, reports_verdicts=True)
        editor = Editor(client, "python", reports_verdicts=True)
        received: list[str] = []
        for i in range(random.Random(round_number).randint(4, 9)):
            _, sid = editor.suggest()
            client.send(
                {
                    "jsonrpc": "2.0",
                    "id": f"show-{sid}",  # not waited for: the next reply_to skips it
                    "method": "workspace/executeCommand",
                    "params": {"command": "codespec.didShow", "arguments": [sid]},
                }
            )
            received.append(sid)
            if i % 3 == 1:
                stats_request(client, {})  # every event before this reply is committed
                acknowledged.update(received)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        conn = sqlite3.connect(db)
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        ids = [row[0] for row in conn.execute("SELECT id FROM requests")]
        shown = {row[0] for row in conn.execute("SELECT id FROM requests WHERE shown = 1")}
        conn.close()
        assert len(ids) == len(set(ids))
        assert acknowledged <= set(ids) and acknowledged <= shown
    assert len(acknowledged) >= 8


def warnings_in(log_path) -> list[str]:
    return [line for line in log_path.read_text().splitlines() if "codespec.stats" in line]


@pytest.mark.parametrize("fault", ["corrupt", "unwritable", "disk full"])
def test_store_faults_leave_completions_working_and_are_reported_once(
    tiny_manifest, tmp_path, fault
):
    db = tmp_path / "stats.sqlite3"
    extra: tuple[str, ...] = ()
    if fault == "corrupt":
        db.write_bytes(b"\x00garbage, not SQLite\x00" * 500)
    elif fault == "unwritable":
        (tmp_path / "blocked").write_text("a file where the state dir should be")
        db = tmp_path / "blocked" / "stats.sqlite3"
    else:
        extra = ("--test-stats-max-pages", "7")  # room for ~50 rows, then "disk is full"
    socket_path = tmp_path / "d.sock"
    proc = start_daemon(tiny_manifest, "--stats-db", str(db), *extra, socket_path=socket_path)
    try:
        client = session(socket_path, reports_verdicts=False)
        editor = Editor(client, "python", reports_verdicts=False)
        rounds = 70 if fault == "disk full" else 3
        for _ in range(rounds):
            editor.accept()  # every request answered with a suggestion
        live = stats_request(client, {})
        assert live["total"]["suggestions"] == rounds and live["total"]["accepted"] == rounds
        status = live["store"]["status"]
        warnings = warnings_in(proc.log_path)
        assert len(warnings) == 1, warnings
        if fault == "corrupt":
            assert status == "file" and "moved to" in warnings[0]
            assert list(tmp_path.glob("stats.sqlite3.corrupt-*"))
        else:
            assert status.startswith("memory")
            assert ("full" if fault == "disk full" else "cannot write") in warnings[0]
            out = subprocess.run(
                [sys.executable, "-m", "codespec", "stats", "--socket", str(socket_path)],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert out.returncode == 0 and "held in its memory only" in out.stderr
            assert "python" in out.stdout
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_hostile_verdicts_and_filters_get_plain_errors_and_count_nothing(stats_daemon):
    proc, socket_path, db = stats_daemon
    client = session(socket_path, reports_verdicts=True)
    hostile = [
        {"command": "codespec.didAccept", "arguments": {"id": 1}},
        {"command": "codespec.didAccept", "arguments": "x"},
        {"command": "codespec.didAccept", "arguments": [[[[1]]]]},
        {"command": "codespec.didPartialAccept", "arguments": ["a" * 100_000, 10**30]},
        {"command": "codespec.didDismiss", "arguments": [None, None, None]},
        {"command": "codespec.nope", "arguments": []},
        {"command": 5},
        {},
    ]
    for i, params in enumerate(hostile):
        client.send(
            {
                "jsonrpc": "2.0",
                "id": f"h{i}",
                "method": "workspace/executeCommand",
                "params": params,
            }
        )
        reply = client.reply_to(f"h{i}")
        if "error" in reply:
            assert reply["error"]["code"] == -32602, reply
            assert "Traceback" not in json.dumps(reply) and "/work" not in json.dumps(reply)
    for i, params in enumerate(
        [{"since": "9" * 400 + "d"}, {"since": 7}, {"language": 5}, {"by": "x"}, [1], "x"]
    ):
        client.send({"jsonrpc": "2.0", "id": f"s{i}", "method": "codespec/stats", "params": params})
        reply = client.reply_to(f"s{i}")
        assert "result" in reply or reply["error"]["code"] == -32602, reply
    python = Editor(client, "python", reports_verdicts=True)
    python.accept()
    assert by_language(stats_request(client, {})) == {"python": (1, 1, 0, 0)}
    assert proc.poll() is None


def test_sigterm_records_the_suggestions_still_showing_and_folds_the_wal(stats_daemon):
    """A daemon stopped (SIGTERM) while suggestions are on screen: they count as left
    unaccepted, in the store's file itself (a copy of it alone holds every row)."""
    proc, socket_path, db = stats_daemon
    client = session(socket_path, reports_verdicts=True)
    editor = Editor(client, "python", reports_verdicts=True)
    _, sid = editor.suggest()
    client.send(
        {
            "jsonrpc": "2.0",
            "id": "show",
            "method": "workspace/executeCommand",
            "params": {"command": "codespec.didShow", "arguments": [sid]},
        }
    )
    assert client.reply_to("show")["result"] is None
    proc.terminate()
    assert proc.wait(timeout=30) == 0
    wal = db.with_name(db.name + "-wal")
    assert not wal.exists() or wal.stat().st_size == 0
    copy = db.with_name("copy.sqlite3")
    copy.write_bytes(db.read_bytes())
    conn = sqlite3.connect(copy)
    verdict = conn.execute("SELECT shown, verdict FROM requests WHERE id = ?", (sid,)).fetchone()
    conn.close()
    assert verdict == (1, "rejected")
