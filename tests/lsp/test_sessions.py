"""pytest-lsp clients through `codespec lsp` (the relay) against the shared tiny-model daemon."""

from __future__ import annotations

import asyncio
import random

import pytest
from lsp_helpers import lsp_client_fixture
from lsprotocol import types
from pygls.exceptions import JsonRpcRequestCancelled
from pytest_lsp import LanguageClient

RAW = {"stopRules": False, "maxTokens": 40, "lineMaxTokens": 40}


client = lsp_client_fixture(RAW)
pytestmark = pytest.mark.usefixtures("daemon")  # (see lsp_client_fixture)


def open_doc(c: LanguageClient, uri: str, text: str, language: str = "python") -> None:
    c.text_document_did_open(
        types.DidOpenTextDocumentParams(
            types.TextDocumentItem(uri=uri, language_id=language, version=1, text=text)
        )
    )


def params(uri: str, line: int, character: int, invoked: bool = True):
    kind = (
        types.InlineCompletionTriggerKind.Invoked
        if invoked
        else types.InlineCompletionTriggerKind.Automatic
    )
    return types.InlineCompletionParams(
        context=types.InlineCompletionContext(trigger_kind=kind),
        text_document=types.TextDocumentIdentifier(uri=uri),
        position=types.Position(line=line, character=character),
    )


def utf16_len(s: str) -> int:
    return len(s.encode("utf-16-le")) // 2


def utf16_position(text: str, offset: int) -> types.Position:
    before = text[:offset].replace("\r\n", "\n")
    line = before.count("\n")
    return types.Position(line=line, character=utf16_len(before.rsplit("\n", 1)[-1]))


async def server_text(c: LanguageClient, uri: str) -> str:
    reply = await c.protocol.send_request_async(
        "codespec/document", types.TextDocumentIdentifier(uri=uri)
    )
    return reply.text


async def test_incremental_edits_with_non_ascii_text_stay_in_sync(client):
    uri = "file:///tmp/sync.py"
    text = "a𐐀b = '漢字'\r\nx = 1\n# ünïcödé 🎉\n"
    open_doc(client, uri, text)
    rng = random.Random(5)
    pieces = ["𐐀", "漢", "é", "x", "\n", "\r\n", "🎉", "abc", ""]
    for version in range(2, 202):
        # Keep offsets on code-point boundaries that do not split a \r\n pair.
        cut = [i for i in range(len(text) + 1) if not (0 < i < len(text) and text[i - 1] == "\r")]
        start = rng.choice(cut)
        end = rng.choice([i for i in cut if start <= i <= min(len(text), start + 4)])
        new = rng.choice(pieces)
        change = types.TextDocumentContentChangePartial(
            range=types.Range(utf16_position(text, start), utf16_position(text, end)), text=new
        )
        text = text[:start] + new + text[end:]
        client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
                content_changes=[change],
            )
        )
    assert await server_text(client, uri) == text
    # A completion at the end of the last line comes back anchored at that very position.
    line = text.count("\n")
    position = types.Position(line=line, character=utf16_len(text.rsplit("\n", 1)[-1]))
    result = await client.text_document_inline_completion_async(
        params(uri, position.line, position.character)
    )
    for item in result.items:
        assert item.range.start == position and item.range.end == position


async def test_streamed_partials_grow_into_the_final_completion(client):
    uri = "file:///tmp/stream.py"
    open_doc(client, uri, "def total(items):\n    \n")
    client.partials.clear()
    result = await client.text_document_inline_completion_async(params(uri, 1, 4))
    assert len(result.items) == 1
    final = result.items[0].insert_text
    texts = [p.text for p in client.partials if p.uri == uri]
    assert len(texts) >= 2
    assert all(b.startswith(a) for a, b in zip(texts, texts[1:], strict=False))
    assert final.startswith(texts[-1].rstrip()) or texts[-1].startswith(final)
    assert {p.version for p in client.partials if p.uri == uri} == {1}


async def test_cancel_reaches_the_decode_loop(client):
    uri = "file:///tmp/cancel.py"
    open_doc(client, uri, "import os\n\n")
    client.partials.clear()
    future = client.protocol.send_request(
        "textDocument/inlineCompletion", params(uri, 2, 0), msg_id="cancel-me"
    )
    while not any(p.id == "cancel-me" for p in client.partials):
        await asyncio.sleep(0.01)
    client.protocol.notify("$/cancelRequest", types.CancelParams(id="cancel-me"))
    with pytest.raises(JsonRpcRequestCancelled):
        await asyncio.wrap_future(future)
    for _ in range(200):
        stats = (await client.protocol.send_request_async("codespec/stats", None)).daemon
        last = stats.last_cancel
        if last and last.passes_at_cancel is not None:
            break
        await asyncio.sleep(0.02)
    assert last.passes_final - last.passes_at_cancel <= 1


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS"))


async def storm(c: LanguageClient, uri: str, n: int) -> list:
    futures = []
    text = "def f(x):\n    return x\n"
    for k in range(n):
        text = text + "y"
        c.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=k + 2),
                content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
            )
        )
        futures.append(
            asyncio.wrap_future(
                c.protocol.send_request(
                    "textDocument/inlineCompletion", params(uri, 2, len(text.split("\n")[-1]))
                )
            )
        )
        await asyncio.sleep(0)
    return await asyncio.gather(*futures, return_exceptions=True)


async def test_keystroke_storm_answers_every_request_once(client, daemon):
    uri = "file:///tmp/storm.py"
    open_doc(client, uri, "def f(x):\n    return x\n")
    await storm(client, uri, 50)  # warm-up: caches, allocator pools
    before = rss_kb(daemon.pid)
    results = await storm(client, uri, 300)
    after_first = rss_kb(daemon.pid)
    results2 = await storm(client, uri, 300)
    after_second = rss_kb(daemon.pid)
    for batch in (results, results2):
        assert len(batch) == 300
        assert not any(isinstance(r, Exception) for r in batch), [
            r for r in batch if isinstance(r, Exception)
        ][:3]
        assert isinstance(batch[-1], types.InlineCompletionList)
    stats = (await client.protocol.send_request_async("codespec/stats", None)).daemon
    assert stats.served >= 2  # the last request of each storm ran to the end
    # Memory does not grow from run to run (allow allocator noise).
    assert after_second - after_first < 20_000, (before, after_first, after_second)


async def test_invalid_settings_fall_back_with_a_message(client):
    client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(
            settings={"codespec": {"maxTokens": -5, "multiline": "sometimes", "bogus": 1}}
        )
    )
    for _ in range(100):
        if len(client.messages) >= 3:
            break
        await asyncio.sleep(0.02)
    joined = " ".join(m.message for m in client.messages)
    assert "maxTokens" in joined and "multiline" in joined and "bogus" in joined
    uri = "file:///tmp/settings.py"
    open_doc(client, uri, "x = 1\n")
    result = await client.text_document_inline_completion_async(params(uri, 1, 0))
    assert isinstance(result, types.InlineCompletionList)  # still serving, with defaults


async def stats_when(c: LanguageClient, condition, timeout: float = 20.0):
    """Poll `codespec/stats` until ``condition(stats)`` holds."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        stats = (await c.protocol.send_request_async("codespec/stats", None)).daemon
        if condition(stats) or asyncio.get_running_loop().time() > deadline:
            return stats
        await asyncio.sleep(0.1)


def edit(c: LanguageClient, uri: str, version: int, line: int, character: int, text: str):
    at = types.Position(line=line, character=character)
    c.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[
                types.TextDocumentContentChangePartial(range=types.Range(at, at), text=text)
            ],
        )
    )


async def test_edits_that_settle_warm_the_next_prompt(client):
    """After an edit rests, the daemon prefills the prompt for the place it ended; the
    request that follows there prefills (almost) nothing."""
    uri = "file:///tmp/warm.py"
    body = "".join(f"def f{i}(x):\n    return x * {i}\n\n" for i in range(30))
    open_doc(client, uri, body)
    before = ((await client.protocol.send_request_async("codespec/stats", None)).daemon).warmed
    edit(client, uri, 2, 90, 0, "def g(y):\n    return y")
    stats = await stats_when(client, lambda s: s.warmed > before and s.warm_tokens > 0)
    assert stats.warmed > before and stats.warm_tokens > 300
    result = await client.text_document_inline_completion_async(params(uri, 91, 12))
    assert result is not None
    stats = (await client.protocol.send_request_async("codespec/stats", None)).daemon
    assert stats.last_prompt.prefill_tokens <= 2, stats.last_prompt
    assert stats.last_prompt.cached_tokens > 300


async def test_a_resting_cursor_warms_its_place(client):
    uri = "file:///tmp/rest.py"
    open_doc(client, uri, "import os\n\n\ndef main():\n    path = os.getcwd()\n    \n")
    before = ((await client.protocol.send_request_async("codespec/stats", None)).daemon).warmed
    client.protocol.notify(
        "codespec/cursor",
        {"textDocument": {"uri": uri}, "position": {"line": 5, "character": 4}},
    )
    stats = await stats_when(client, lambda s: s.warmed > before)
    assert stats.warmed > before
    await client.text_document_inline_completion_async(params(uri, 5, 4))
    stats = (await client.protocol.send_request_async("codespec/stats", None)).daemon
    assert stats.last_prompt.prefill_tokens <= 2, stats.last_prompt


async def test_no_warm_up_for_a_disabled_language(client):
    client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"disabledLanguages": ["lua"]})
    )
    uri = "file:///tmp/off.lua"
    open_doc(client, uri, "local x = 1\n", language="lua")
    before = (await client.protocol.send_request_async("codespec/stats", None)).daemon.warmed
    edit(client, uri, 2, 1, 0, "local y = 2")
    await asyncio.sleep(1.5)  # five times the warm-up delay
    stats = (await client.protocol.send_request_async("codespec/stats", None)).daemon
    assert stats.warmed == before
    # Positive control: the same edit in a language that is not disabled warms its place, in
    # the same session and within the same wait.
    on = "file:///tmp/on.py"
    open_doc(client, on, "x = 1\n")
    edit(client, on, 2, 1, 0, "y = 2")
    stats = await stats_when(client, lambda s: s.warmed > before, timeout=1.5)
    assert stats.warmed > before
