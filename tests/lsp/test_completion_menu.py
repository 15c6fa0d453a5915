"""A completion menu open in the editor (LSP 3.18's ``selectedCompletionInfo``): the completion
is made as if the selected item were typed, and its item replaces the item's range with the
item's text and the completion, so that VS Code shows it beside its suggest widget. Through
`codespec lsp` against the shared tiny-model daemon."""

from __future__ import annotations

import pytest
from lsp_helpers import lsp_client_fixture
from lsprotocol import types
from pytest_lsp import LanguageClient

RAW = {"stopRules": False, "maxTokens": 12, "lineMaxTokens": 12, "warmAhead": False}
HEAD = "def area(width, height):\n    "


client = lsp_client_fixture(RAW)
pytestmark = pytest.mark.usefixtures("daemon")  # (see lsp_client_fixture)


def open_doc(c: LanguageClient, uri: str, text: str) -> None:
    c.text_document_did_open(
        types.DidOpenTextDocumentParams(
            types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)
        )
    )


def close_doc(c: LanguageClient, uri: str) -> None:
    c.text_document_did_close(
        types.DidCloseTextDocumentParams(types.TextDocumentIdentifier(uri=uri))
    )


async def complete(
    c: LanguageClient, uri: str, at: types.Position, selected=None
) -> types.InlineCompletionItem | None:
    context = types.InlineCompletionContext(
        trigger_kind=types.InlineCompletionTriggerKind.Invoked,
        selected_completion_info=selected,
    )
    params = types.InlineCompletionParams(
        context=context, text_document=types.TextDocumentIdentifier(uri=uri), position=at
    )
    result = await c.text_document_inline_completion_async(params)
    items = result.items if isinstance(result, types.InlineCompletionList) else result
    return items[0] if items else None


def menu_item(line: int, start: int, end: int, text: str) -> types.SelectedCompletionInfo:
    return types.SelectedCompletionInfo(
        range=types.Range(types.Position(line, start), types.Position(line, end)), text=text
    )


async def test_a_selected_menu_item_is_completed_as_if_it_were_typed(client):
    # the user typed "ret" and the menu selects "return": the item replaces "ret" with "return"
    # and what the model writes after "return" (both documents share a file name, so their
    # prompts are the same once "return" is in place)
    typed = "file:///tmp/menu/typed/area.py"
    open_doc(client, typed, HEAD + "ret")
    at = types.Position(1, 7)
    item = await complete(client, typed, at, menu_item(1, 4, 7, "return"))
    assert item is not None and item.range == types.Range(types.Position(1, 4), at), item
    assert item.insert_text.startswith("return") and len(item.insert_text) > len("return"), item
    streamed = [p.text for p in client.partials if p.uri == typed]
    assert streamed and all(text.startswith("return") for text in streamed), streamed
    close_doc(client, typed)

    whole = "file:///tmp/menu/whole/area.py"
    open_doc(client, whole, HEAD + "return")
    plain = await complete(client, whole, types.Position(1, 10))
    assert plain is not None and plain.range == types.Range(
        types.Position(1, 10), types.Position(1, 10)
    )
    assert item.insert_text == "return" + plain.insert_text


async def test_typing_on_through_the_menu_item_needs_no_model_run(client):
    uri = "file:///tmp/menu/through.py"
    open_doc(client, uri, HEAD + "ret")
    item = await complete(client, uri, types.Position(1, 7), menu_item(1, 4, 7, "return"))
    assert item is not None
    suggestion_id = item.command.arguments[0]
    # "u" typed: the menu still selects "return", and the same suggestion answers
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
            content_changes=[
                types.TextDocumentContentChangePartial(
                    range=types.Range(types.Position(1, 7), types.Position(1, 7)), text="u"
                )
            ],
        )
    )
    again = await complete(client, uri, types.Position(1, 8), menu_item(1, 4, 8, "return"))
    assert again is not None and again.insert_text == item.insert_text
    assert again.command.arguments[0] == suggestion_id
    # the menu closed (the item accepted): the rest of the same suggestion, at the cursor
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=3),
            content_changes=[types.TextDocumentContentChangeWholeDocument(HEAD + "return")],
        )
    )
    rest = await complete(client, uri, types.Position(1, 10))
    assert rest is not None and "return" + rest.insert_text == item.insert_text
    assert rest.command.arguments[0] == suggestion_id
    # the ghost text accepted too: the document holds the whole suggestion where it was made
    accepted = await accepted_count(client)
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=4),
            content_changes=[types.TextDocumentContentChangeWholeDocument(HEAD + item.insert_text)],
        )
    )
    assert await accepted_count(client) == accepted + 1


async def accepted_count(c: LanguageClient) -> int:
    report = await c.protocol.send_request_async("codespec/stats", {"since": "all"})
    return report.total.accepted


async def test_a_menu_item_elsewhere_than_before_the_cursor_is_left_out(client):
    uri = "file:///tmp/menu/elsewhere.py"
    open_doc(client, uri, HEAD + "ret")
    at = types.Position(1, 7)
    plain = await complete(client, uri, at)
    # a range on another line, one that ends before the cursor, an item too long to be a word:
    # completed as if no menu were open (the item's range is the empty one at the cursor)
    for odd in (
        menu_item(0, 0, 3, "define"),
        menu_item(1, 4, 6, "return"),
        menu_item(1, 4, 7, "r" * 5000),
    ):
        item = await complete(client, uri, at, odd)
        assert item is not None and item.range == types.Range(at, at), (odd, item)
        assert item.insert_text == plain.insert_text
