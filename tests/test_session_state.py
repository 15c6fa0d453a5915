"""One record per open document (``server/state.py``): closing it is one removal that ends
everything the session kept for it, and work asked before it closed is stale."""

from __future__ import annotations

import asyncio

from codespec.completion import CompletionOptions
from codespec.server.documents import Document
from codespec.server.places import Place
from codespec.server.state import SessionState, Shown
from codespec.stops import Cursor

URI = "file:///a.py"


def place_in(state: SessionState, uri: str) -> Place:
    record = state.documents[uri]
    return Place(
        state.id,
        uri,
        record.edits_now(),
        Cursor("x", "", "python"),
        CompletionOptions(),
        current_edits=record.edits_now,
        anchor=record.anchor,
    )


def test_closing_a_document_is_one_removal_that_ends_what_was_kept_for_it():
    async def scenario() -> None:
        state = SessionState()
        record = state.opened(Document(URI, "x = 1\n", 1, "python"))
        other = state.opened(Document("file:///b.py", "y = 2\n", 1, "python"))
        record.shown = Shown("x", "", " = 1", "id-1")
        record.too_large_logged = True
        fired: list[str] = []
        loop = asyncio.get_running_loop()
        record.warm_timer = loop.call_later(0.05, fired.append, "a")
        other.warm_timer = loop.call_later(0.05, fired.append, "b")
        work = place_in(state, URI)
        assert not work.stale()  # (positive control: nothing happened to the document yet)

        assert state.closed(URI) is record
        assert URI not in state.documents and record.closed
        assert work.stale()  # closed: as good as edited since
        await asyncio.sleep(0.1)
        assert fired == ["b"]  # its warm-up never ran; the other document's did
        assert state.closed(URI) is None  # (closing it again: nothing to close)

    asyncio.run(scenario())


def test_opening_a_document_again_closes_its_earlier_record():
    state = SessionState()
    first = state.opened(Document(URI, "x = 1\n", 1, "python"))
    work = place_in(state, URI)
    second = state.opened(Document(URI, "x = 2\n", 2, "python"))
    assert first.closed and not second.closed and state.documents[URI] is second
    assert work.stale() and second.shown is None and not second.too_large_logged


def test_a_jobs_anchor_is_its_own_documents():
    """A job holds its document's anchor slot, not the session's maps: what the worker keeps
    there reaches the next job at that document and no other."""
    state = SessionState()
    state.opened(Document(URI, "x = 1\n", 1, "python"))
    state.opened(Document("file:///b.py", "y = 2\n", 1, "python"))
    first, other = place_in(state, URI), place_in(state, "file:///b.py")
    first.keep_anchor(object())  # type: ignore[arg-type]  (any anchor: the slot keeps it)
    assert place_in(state, URI).anchored is first.anchored is not None
    assert other.anchored is None
