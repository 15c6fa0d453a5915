"""Looking ahead at the next keystroke, through a real daemon over raw JSON-RPC: after an
answer the daemon computes the likeliest next keystrokes; one of them is then answered from
rows computed ahead (``ahead_hits``), with the completion it gets with the look-ahead off; typing
through the ghost text looks ahead at the new place; ``lookAheadKeys: 0`` turns it off.

The daemon runs the tiny pair in w8a8 (the CPU's quantized kernels), where one-row passes are
exact and the daemon looks ahead. Which characters it computes is worked out here the way the
daemon does (the same tiny weights and kernels in this process; prompt windows by token count,
``promptSeconds: 0``, so that both build the same prompt).
"""

from __future__ import annotations

import time

import pytest
from lsp_helpers import RUNTIME, start_daemon
from rpc import inline_request, unix_client

from codespec.completion import CompletionOptions, prompt_at
from codespec.lookahead import likely_next_chars
from codespec.runtime import load_pair
from codespec.stops import Cursor

SOCKET = RUNTIME / "look-ahead.sock"
URI = "file:///work/shapes.py"
TEXT = "".join(f"def area{i}(w, h):\n    return w * h + {i}\n\n" for i in range(8))
LINE = 4  # "    return w * h + 1": the cursor after its indentation, the rest cut
# no stop rules: the tiny model's text as it comes (its random tokens are no Python)
SETTINGS = {
    "promptSeconds": 0,
    "maxTokens": 6,
    "lineMaxTokens": 6,
    "lookAheadKeys": 6,
    "stopRules": False,
}


@pytest.fixture(scope="module")
def daemon(tiny_manifest):
    proc = start_daemon(tiny_manifest, "--quantize", "w8a8", socket_path=SOCKET)
    yield proc
    proc.terminate()
    proc.wait(timeout=30)


@pytest.fixture(scope="module")
def same_pair(tiny_manifest):
    return load_pair(str(tiny_manifest), progress=lambda m: None, quantize="w8a8")


class Session:
    def __init__(self, settings: dict) -> None:
        self.client = unix_client(SOCKET)
        self.client.sock.settimeout(120)
        self.client.send(
            {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {"capabilities": {}, "initializationOptions": settings},
            }
        )
        self.client.reply_to(0)
        self.client.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
        self.version, self.msg = 1, 0

    def notify(self, method: str, params: dict) -> None:
        self.client.send({"jsonrpc": "2.0", "method": method, "params": params})

    def open(self, text: str) -> None:
        doc = {"uri": URI, "languageId": "python", "version": 1, "text": text}
        self.notify("textDocument/didOpen", {"textDocument": doc})

    def type(self, line: int, character: int, text: str) -> None:
        self.version += 1
        at = {"line": line, "character": character}
        change = {"range": {"start": at, "end": at}, "text": text}
        self.notify(
            "textDocument/didChange",
            {"textDocument": {"uri": URI, "version": self.version}, "contentChanges": [change]},
        )

    def complete(self, line: int, character: int) -> str:
        self.msg += 1
        self.client.send(inline_request(self.msg, URI, line, character, trigger_kind=1))
        items = (self.client.reply_to(self.msg)["result"] or {}).get("items") or []
        return items[0]["insertText"] if items else ""

    def stats(self) -> dict:
        self.msg += 1
        self.client.send(
            {"jsonrpc": "2.0", "id": self.msg, "method": "codespec/stats", "params": {}}
        )
        return self.client.reply_to(self.msg)["result"]["daemon"]

    def stats_when(self, condition, timeout: float = 60.0) -> dict:
        deadline = time.monotonic() + timeout
        while not condition(stats := self.stats()):
            assert time.monotonic() < deadline, f"timed out: {stats}"
            time.sleep(0.05)
        return stats


def cut_text() -> str:
    lines = TEXT.split("\n")
    lines[LINE] = "    "
    return "\n".join(lines)


def chars_looked_ahead(pair, shown: str, count: int) -> list[str]:
    """The characters the daemon computes ahead at the cut place (see the module docstring)."""
    text = cut_text()
    offset = len("\n".join(text.split("\n")[:LINE])) + 1 + 4
    cursor = Cursor(text[:offset], text[offset:])
    options = CompletionOptions(prompt_seconds=0)
    prompt, _ = prompt_at(pair, cursor, options, path="shapes.py")
    logits, _, _ = pair.engine.target.prefill(prompt)
    return likely_next_chars(pair.tokenizer, logits, count, skip=shown[:1])


def test_a_keystroke_computed_ahead_gets_the_completion_it_gets_without(daemon, same_pair):
    session = Session(SETTINGS)
    session.open(cut_text())
    before = session.stats()
    shown = session.complete(LINE, 4)
    session.stats_when(lambda s: s["looked_ahead"] > before["looked_ahead"])
    chars = chars_looked_ahead(same_pair, shown, SETTINGS["lookAheadKeys"])
    assert chars, "the tiny model's likeliest tokens begin with some character"
    typed = chars[0]
    session.type(LINE, 4, typed)
    looked_ahead = session.complete(LINE, 5)
    stats = session.stats()
    assert stats["ahead_hits"] == before["ahead_hits"] + 1
    # it looks ahead at the new place too; then the session ends (nothing more of it runs)
    session.stats_when(lambda s: s["looked_ahead"] > stats["looked_ahead"])
    session.client.sock.close()

    # the same keystroke with the look-ahead off, in a session of its own
    plain = Session({**SETTINGS, "lookAheadKeys": 0})
    plain.open(cut_text())
    assert plain.complete(LINE, 4) == shown
    time.sleep(0.5)
    plain.type(LINE, 4, typed)
    assert plain.complete(LINE, 5) == looked_ahead
    assert plain.stats()["ahead_hits"] == stats["ahead_hits"]


def test_typing_through_looks_ahead_at_the_new_place(daemon):
    session = Session(SETTINGS)
    session.open(cut_text())
    before = session.stats()
    shown = session.complete(LINE, 4)
    assert len(shown) >= 2 and "\n" not in shown[:1]
    stats = session.stats_when(lambda s: s["looked_ahead"] > before["looked_ahead"])
    session.type(LINE, 4, shown[0])
    assert session.complete(LINE, 5) == shown[1:]  # typed through: no model run
    session.stats_when(lambda s: s["looked_ahead"] > stats["looked_ahead"])
