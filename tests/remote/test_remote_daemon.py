"""`codespec serve --engine URL` end to end: an editor's client through `codespec lsp` gets
streamed completions from a real llama-cpp-python server, the stats row says so, and when the
server goes away the editor is answered empty at once and hears `codespec/status`, which
recovers by itself when the server is back."""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient
from remote_helpers import daemon_on_a_remote_engine, needs_server

# the daemon first: pytest-lsp starts the relay before it asks for the client fixture's own
# arguments, and a relay that finds no daemon starts one of its own with the embedded pair
pytestmark = [needs_server, pytest.mark.usefixtures("remote_daemon")]
FOLDER = Path(tempfile.mkdtemp(prefix="codespec-remote-"))
SOCKET = FOLDER / "d.sock"  # (where daemon_on_a_remote_engine puts it)
URI = "file:///tmp/remote_demo.py"
TEXT = "def add(a, b):\n    return "


@pytest.fixture(scope="module")
def remote_daemon(tiny_manifest):
    """A daemon decoding on a llama-cpp-python server behind a fault proxy: (process, proxy)."""
    with daemon_on_a_remote_engine(tiny_manifest, FOLDER, "--max-tokens", "24") as running:
        daemon, proxy, _ = running
        yield daemon, proxy


@pytest_lsp.fixture(
    config=ClientServerConfig(
        server_command=[sys.executable, "-m", "codespec", "lsp", "--socket", str(SOCKET)]
    )
)
async def client(lsp_client: LanguageClient, remote_daemon):
    lsp_client.partials, lsp_client.statuses = [], []

    @lsp_client.feature("codespec/partialCompletion")
    def on_partial(params):
        lsp_client.partials.append(params)

    @lsp_client.feature("codespec/status")
    def on_status(params):
        lsp_client.statuses.append(params)

    await lsp_client.initialize_session(
        types.InitializeParams(
            capabilities=types.ClientCapabilities(),
            process_id=None,
            # the random model never ends a line: with stop rules its line is cut at the limit
            initialization_options={"stopRules": False},
        )
    )
    lsp_client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            types.TextDocumentItem(uri=URI, language_id="python", version=1, text=TEXT)
        )
    )
    yield
    await lsp_client.shutdown_session()


def inline(client: LanguageClient, invoked: bool = True):
    return client.text_document_inline_completion_async(
        types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(URI),
            position=types.Position(1, 11),
            context=types.InlineCompletionContext(
                trigger_kind=types.InlineCompletionTriggerKind(1 if invoked else 2)
            ),
        )
    )


async def wait_for(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        await asyncio.sleep(0.05)
    return predicate()


async def test_completion_streams_and_is_recorded_then_survives_the_server_going(
    client: LanguageClient, remote_daemon
):
    proc, proxy = remote_daemon
    result = await asyncio.wait_for(inline(client), 30)
    text = result.items[0].insert_text if result and result.items else ""
    assert text, "the server's completion reached the editor"
    assert client.partials and text.startswith(client.partials[0].text[:1])
    stats = await client.protocol.send_request_async("codespec/stats", {})
    total = stats.total  # (pygls hands a custom method's result over as named tuples)
    assert total.requests >= 1 and total.suggestions >= 1
    assert total.stops  # the stop reason the stream ended with

    proxy.mode = "drop"  # the server goes away
    t0 = time.monotonic()
    result = await asyncio.wait_for(inline(client), 30)
    assert time.monotonic() - t0 < 3.0
    assert not (result and result.items and result.items[0].insert_text)
    assert await wait_for(lambda: client.statuses, 5)
    assert client.statuses[-1].state == "remote unreachable"
    assert "127.0.0.1" in client.statuses[-1].message

    proxy.mode = "pass"  # back, with no request to notice it: the probe does
    assert await wait_for(lambda: client.statuses[-1].state == "ready", 10)
    result = await asyncio.wait_for(inline(client), 30)
    assert result and result.items and result.items[0].insert_text
    assert proc.poll() is None
    log = proc.log_path.read_text()
    assert log.count("unreachable:") == 1, log[-3000:]
