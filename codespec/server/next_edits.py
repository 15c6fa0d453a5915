"""Next-edit requests as Copilot's language server speaks them (``lsp/PROTOCOL.md``, "Next
edits"): ``textDocument/copilotInlineEdit`` asks for the edits the recent ones call for in the
window around a position; ``textDocument/didShowInlineEdit`` says one was shown.

A request becomes a job on the engine worker like a completion (``places.NextEditAsk``: the
document's text, line and edit history as they are now; ``nextedit/suggest.py`` runs it). An
answer for a document that moved on meanwhile is dropped, as completions' are.
"""

from __future__ import annotations

import logging
from copy import deepcopy
from typing import TYPE_CHECKING, Any

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams

from ..nextedit.edits import LineEdit
from ..nextedit.prompt import Window
from ..settings import completion_options
from .documents import Document
from .jobs import completes_in, place_at, run_job
from .places import Job, NextEditAsk
from .state import open_document

if TYPE_CHECKING:
    from .session import CodespecServer

log = logging.getLogger("codespec.session")
INLINE_EDIT = "textDocument/copilotInlineEdit"
DID_SHOW_INLINE_EDIT = "textDocument/didShowInlineEdit"


async def inline_edit(ls: CodespecServer, params: Any) -> dict:
    """``{textDocument: {uri, version}, position}`` -> ``{edits: [{text, textDocument, range}]}``
    (no edits: nothing worth suggesting, next edits turned off, or the document moved on)."""
    uri, version, position = _request(params)
    state = ls.session
    doc = open_document(state, uri)
    if not state.settings.next_edit_suggestions or not completes_in(state, doc):
        return {"edits": []}
    encoding = ls.protocol.encoding
    position = doc.clamp(position, encoding)
    offset = doc.offset_at(position, encoding)
    place = place_at(ls, doc, offset, completion_options(state.settings, invoked=True))
    ask = NextEditAsk(doc.text, position.line, deepcopy(doc.history))
    job = Job.at(place, next_edit=ask)
    await run_job(ls, job)
    if job.found is None or job.stale():
        return {"edits": []}
    document = {"uri": uri, "version": version if version is not None else doc.version}
    window = job.found.window
    return {"edits": [_wire(doc, window, edit, document, encoding) for edit in job.found.edits]}


def did_show_inline_edit(ls: CodespecServer, params: Any) -> None:
    """A client showed an edit (its acceptance does not reach the stats yet)."""
    log.debug("session %s: a next edit was shown", ls.session.id)


def _request(params: Any) -> tuple[str, int | None, types.Position]:
    try:
        uri = params["textDocument"]["uri"]
        version = params["textDocument"].get("version")
        line, character = params["position"]["line"], params["position"]["character"]
        position = types.Position(line=int(line), character=int(character))
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError):
        raise JsonRpcInvalidParams("expected {textDocument: {uri, version}, position}") from None
    if not isinstance(uri, str) or not (version is None or isinstance(version, int)):
        raise JsonRpcInvalidParams("expected {textDocument: {uri, version}, position}")
    return uri, version, position


def _wire(doc: Document, window: Window, edit: LineEdit, document: dict, encoding: str) -> dict:
    """One edit as the protocol has it: whole lines of the document and their new text."""
    starts = doc.line_starts()

    def at(line: int) -> int:  # (the offset where a line starts; past the last: the end)
        return starts[line] if line < len(starts) else len(doc.text)

    begin = doc.position_at(at(window.first + edit.first), encoding)
    end = doc.position_at(at(window.first + edit.end), encoding)
    return {
        "text": edit.new,
        "textDocument": document,
        "range": {
            "start": {"line": begin.line, "character": begin.character},
            "end": {"line": end.line, "character": end.character},
        },
    }
