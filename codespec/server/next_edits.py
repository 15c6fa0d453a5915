"""Next-edit requests as Copilot's language server speaks them (``lsp/PROTOCOL.md``, "Next
edits"): ``textDocument/copilotInlineEdit`` asks for the edits the recent ones call for in the
window around a position; ``textDocument/didShowInlineEdit`` says one was shown.

A request becomes a job on the engine worker like a completion (``kinds.NextEditJob``: the
document's text, line and edit history as they are now; ``nextedit/suggest.py`` runs it). An
answer for a document that moved on meanwhile is dropped, as completions' are.

An answer holds one edit (Copilot's clients read an answer's edits as alternatives and show the
first), shown only where the model is sure enough of it for the user's ``nextEditEagerness``.
Nothing is asked of the model after an edit that calls for none (whitespace, a comment's words,
fresh code on blank lines: ``nextedit/asking.py``), and an edit that would leave the file
broken is never shown (``nextedit/guard.py``). It is a
suggestion like a completion, with its id in its ``command``, so the verdicts reach the
stats (``stats/verdicts.py``): the edit's new text between the lines around it.
"""

from __future__ import annotations

import logging
from copy import deepcopy
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams

from ..languages import language_for
from ..nextedit.asking import worth_asking
from ..nextedit.edits import EAGERNESS, LineEdit
from ..nextedit.prompt import Window
from ..settings import completion_options
from ..stats.verdicts import Suggestion
from .documents import Document, read_position
from .jobs import completes_in, place_at, run_job
from .kinds import NextEditJob
from .places import NextEditAsk
from .session_server import CodespecServer
from .state import open_document

log = logging.getLogger("codespec.session")
INLINE_EDIT = "textDocument/copilotInlineEdit"
DID_SHOW_INLINE_EDIT = "textDocument/didShowInlineEdit"


async def inline_edit(ls: CodespecServer, params: Any) -> dict:
    """``{textDocument: {uri, version}, position}`` -> ``{edits: [{text, textDocument, range,
    command}]}``: one edit, or none (nothing worth suggesting or sure enough, next edits turned
    off, or the document moved on)."""
    uri, version, position = _request(params)
    state = ls.session
    record = open_document(state, uri)
    doc = record.document
    if not state.settings.next_edit_suggestions or not completes_in(state, record):
        return {"edits": []}
    if not worth_asking(doc.history, language_for(doc.language_id, doc.uri)):
        return {"edits": []}  # (an edit that calls for none: no model run)
    encoding = ls.protocol.encoding
    position = doc.clamp(position, encoding)
    offset = doc.offset_at(position, encoding)
    place = place_at(ls, record, offset, completion_options(state.settings, invoked=True))
    eagerness = state.settings.next_edit_eagerness
    history = deepcopy(doc.history)
    ask = NextEditAsk(doc.text, position.line, history, EAGERNESS[eagerness], eagerness != "high")
    job = NextEditJob.at(place, ask=ask)
    await run_job(ls, job)
    found, hunk = job.found, job.edit()
    if found is None or hunk is None or job.stale():
        return {"edits": []}  # (an edit held back is not a suggestion: its stats row says so)
    state.ledger.offered(_suggestion(doc, found.window, hunk, job.id))
    edit = {
        **_wire(doc, found.window, hunk, encoding),
        "textDocument": {"uri": uri, "version": version if version is not None else doc.version},
        # (clients run it when they apply the edit: the accept reaches the stats)
        "command": {
            "title": "codespec: accepted",
            "command": "codespec.didAccept",
            "arguments": [job.id],
        },
    }
    return {"edits": [edit]}


def did_show_inline_edit(ls: CodespecServer, params: Any) -> None:
    """A client showed an edit: ``{item: {command: {arguments: [id]}}}`` as Copilot's clients
    send it (anything else is ignored, as a verdict for an unknown id is)."""
    try:
        suggestion_id = params["item"]["command"]["arguments"][0]
    except (KeyError, TypeError, IndexError):
        log.debug("session %s: didShowInlineEdit without an edit's id", ls.session.id)
        return
    ls.session.ledger.shown(suggestion_id)


def _suggestion(doc: Document, window: Window, hunk: LineEdit, suggestion_id: str) -> Suggestion:
    """The edit as a suggestion the ledger can judge: its new text where its old lines are
    now, the window's lines around it the text that must stay for it to be the same place."""
    starts = doc.line_starts()

    def at(line: int) -> int:
        return starts[line] if line < len(starts) else len(doc.text)

    window_start, begin = at(window.first), at(window.first + hunk.first)
    end, window_end = at(window.first + hunk.end), at(window.end)
    return Suggestion(
        suggestion_id,
        doc.uri,
        head=doc.text[window_start:begin],
        tail=doc.text[end:window_end],
        text=hunk.new,
        head_start=window_start,
        tail_after=len(doc.text) - window_end,
    )


def _request(params: Any) -> tuple[str, int | None, types.Position]:
    try:
        uri = params["textDocument"]["uri"]
        version = params["textDocument"].get("version")
        position = read_position(params["position"])
    except (KeyError, TypeError, ValueError, AttributeError):
        raise JsonRpcInvalidParams("expected {textDocument: {uri, version}, position}") from None
    if not isinstance(uri, str) or not (version is None or isinstance(version, int)):
        raise JsonRpcInvalidParams("expected {textDocument: {uri, version}, position}")
    return uri, version, position


def _wire(doc: Document, window: Window, edit: LineEdit, encoding: str) -> dict:
    """One edit as the protocol has it: whole lines of the document and their new text."""
    starts = doc.line_starts()

    def at(line: int) -> int:  # (the offset where a line starts; past the last: the end)
        return starts[line] if line < len(starts) else len(doc.text)

    begin = doc.position_at(at(window.first + edit.first), encoding)
    end = doc.position_at(at(window.first + edit.end), encoding)
    return {
        "text": edit.new,
        "range": {
            "start": {"line": begin.line, "character": begin.character},
            "end": {"line": end.line, "character": end.character},
        },
    }
