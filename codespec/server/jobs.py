"""From a session's request to a job for the engine worker, and from its result to the reply.

`inline_completion` reads as the steps of a request: is this document completed in; where is
the cursor (``place_at``, shared with warm-ups), with the editor's selected menu item in place
when there is one (``selection_in``); what kind of completion (tree-sitter, then the user's
multi-line policy); typed through the last answer (no model run); else a job on the worker
(``run_job``), streaming `codespec/partialCompletion` meanwhile (``streamer``), and the answer
remembered for its verdict (``offered``). ``schedule_warm`` submits the same place as a warm-up
once edits or the cursor rest.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import unquote, urlparse

from lsprotocol import types
from pygls.exceptions import JsonRpcInternalError

from ..completion import CompletionOptions, with_definitions
from ..languages import language_for
from ..settings import completion_options
from ..sources import NEIGHBOUR_CONTEXT, WORKSPACE_CONTEXT
from ..stats.verdicts import Suggestion
from ..stops import Cursor, Mode, decide_mode
from ..workspace.context import FAMILIES
from ..workspace.snippets import Neighbour, Snippet, choose_snippets
from ..workspace.snippets import as_files as snippet_files
from .documents import MAX_DOCUMENT_CHARS, Document
from .folders import context_files, drafting_corpora
from .kinds import CompletionJob, Job, WarmJob
from .places import Place
from .session_server import CodespecServer
from .state import OpenDocument, SessionState, Shown, open_document
from .worker import ModelUnavailable

log = logging.getLogger("codespec.session")
PARTIAL = "codespec/partialCompletion"
# a completion-menu item longer than this is no word the user is typing: it is not completed
MAX_SELECTED_CHARS = 1000


async def inline_completion(
    ls: CodespecServer, params: types.InlineCompletionParams
) -> types.InlineCompletionList:
    """Snapshot the document at the cursor, run a job on the worker, answer with one item."""
    state, settings = ls.session, ls.session.settings
    record = open_document(state, params.text_document.uri)
    doc = record.document
    if not completes_in(state, record):
        return no_items()
    encoding = ls.protocol.encoding
    position = doc.clamp(params.position, encoding)  # past a line's end: at its end
    offset = doc.offset_at(position, encoding)
    selected = selection_in(doc, params.context, offset, encoding)
    invoked = params.context.trigger_kind == types.InlineCompletionTriggerKind.Invoked
    place = place_at(ls, record, offset, completion_options(settings, invoked), selected)
    syntax = decide_mode(place.cursor, invoked, settings.complete_mid_word)
    place.options.mode = apply_multiline_policy(syntax, settings.multiline)
    lead = selected.text if selected else ""  # the item's text starts with the menu item's
    start = doc.position_at(selected.start, encoding) if selected else position
    where = types.Range(start, position)  # (empty without a menu item: codespec inserts)
    if (through := typed_through(record.shown, place.cursor)) is not None:
        rest, suggestion_id = through
        # no model run; while the user types on, compute ahead the keystrokes that leave it
        # (not with a menu item in place: ``rest`` follows the item, not the document)
        if selected is None:
            schedule_warm(ls, offset, record, delay_ms=0, shown_next=rest[0])
        return types.InlineCompletionList(items=[inline_item(lead + rest, where, suggestion_id)])
    job = CompletionJob.at(place, on_text=streamer(ls, doc, lead))
    text = await run_job(ls, job)
    if not text:
        return no_items()
    offered(state, record, offset, job, text, selected)
    return types.InlineCompletionList(items=[inline_item(lead + text, where, job.id)])


@dataclass(frozen=True)
class Selection:
    """The item selected in the editor's completion menu (LSP 3.18's ``selectedCompletionInfo``):
    it would replace the text from ``start`` to the cursor with ``text``. The completion is made
    as if it had, so that editors show the ghost text beside the menu (VS Code shows an inline
    item there only when it extends the selected item)."""

    start: int
    text: str


def selection_in(
    doc: Document, context: types.InlineCompletionContext, offset: int, encoding: str
) -> Selection | None:
    """The selected menu item, when its range ends at the cursor and starts on the cursor's
    line (a word being typed); anything else is completed as if no menu were open."""
    info = context.selected_completion_info
    if info is None or len(info.text) > MAX_SELECTED_CHARS:
        return None
    start = doc.offset_at(info.range.start, encoding)
    end = doc.offset_at(info.range.end, encoding)
    line_start = doc.text.rfind("\n", 0, offset) + 1
    if end != offset or not line_start <= start <= offset:
        return None
    return Selection(start, info.text)


def no_items() -> types.InlineCompletionList:
    return types.InlineCompletionList(items=[])


def completes_in(state: SessionState, record: OpenDocument) -> bool:
    """Whether this session completes in the document (on, its language not turned off, not
    too large; a too-large document is logged once)."""
    settings, doc = state.settings, record.document
    if not settings.enabled or doc.language_id in settings.disabled_languages:
        return False
    if doc.too_large:
        if not record.too_large_logged:
            record.too_large_logged = True
            log.info(
                "no completions in a document of %d characters (the limit is %d)",
                len(doc.text),
                MAX_DOCUMENT_CHARS,
            )
        return False
    return True


def place_at(
    ls: CodespecServer,
    record: OpenDocument,
    offset: int,
    options: CompletionOptions,
    selected: Selection | None = None,
) -> Place:
    """The place a request at ``offset`` in ``doc`` asks about: the text either side (with the
    selected menu item in place of what it replaces), the other open documents of its
    language (and the workspace's definitions of names near the cursor: ``workspace.py``), and
    how to tell that the document moved on since."""
    state, doc = ls.session, record.document
    prefix, suffix = doc.split(max(0, min(offset, len(doc.text))))
    if selected is not None:
        prefix = prefix[: len(prefix) - (offset - selected.start)] + selected.text
    cursor = Cursor(prefix, suffix, language_for(doc.language_id, doc.uri))
    uri = doc.uri
    relative, definitions = context_files(ls, record, prefix, suffix, options)
    snippets = snippet_files(neighbour_snippets(state, record, prefix))
    # (other files' text may leave the machine: lsp/PROTOCOL.md)
    definitions = ls.daemon.outbound(definitions, state.settings.remote_workspace_context)
    snippets = ls.daemon.outbound(snippets)
    corpora = drafting_corpora(ls, doc)
    if definitions:
        options = with_definitions(options)
    return Place(
        session=state.id,
        uri=uri,
        edits=doc.edits,
        cursor=cursor,
        options=options,
        path=relative or document_name(uri),
        extra_files=definitions + snippets,
        context=(WORKSPACE_CONTEXT,) * bool(definitions) + (NEIGHBOUR_CONTEXT,) * bool(snippets),
        corpora=corpora,
        current_edits=record.edits_now,
        anchor=record.anchor,
        language=doc.language_id or cursor.language.name,
        client=state.client_name,
    )


def streamer(ls: CodespecServer, doc: Document, lead: str = "") -> Callable[[str], None]:
    """Send each longer text of the request being handled as ``codespec/partialCompletion``,
    after ``lead`` (the selected menu item's text, which the final item starts with too);
    called on the worker's thread, the notification goes out on the event loop's."""
    loop = asyncio.get_running_loop()
    payload = {"id": ls.protocol.msg_id, "uri": doc.uri, "version": doc.version or 0}

    def on_text(partial: str) -> None:
        loop.call_soon_threadsafe(ls.protocol.notify, PARTIAL, {**payload, "text": lead + partial})

    return on_text


async def run_job(ls: CodespecServer, job: Job) -> str:
    """The job's text from the worker ("" for none); failures become the right LSP errors."""
    future = ls.daemon.worker.submit(job)
    try:
        result = await asyncio.wrap_future(future)
    except asyncio.CancelledError:
        # $/cancelRequest: a decoding pass stops between two layers; a prefill chunk finishes
        # (the next request at this place, usually close behind, reuses it) unless it is a
        # keystroke's few tokens, cheaper to redo (``engine/stop.py``)
        job.signal.cancel(keep_chunk=True)
        raise
    except ModelUnavailable as exc:
        raise JsonRpcInternalError(str(exc)) from None
    except Exception:
        log.exception("completion failed")
        raise JsonRpcInternalError("the completion failed (details in the daemon log)") from None
    return result.text if result is not None else ""


def offered(
    state: SessionState,
    record: OpenDocument,
    offset: int,
    job: Job,
    text: str,
    selected: Selection | None = None,
) -> None:
    """Remember what is shown at the place, for typed-through answers and the verdict. With a
    menu item selected, the suggestion is that item's text and the completion, from where the
    item starts: typing the item or accepting it is then taking the suggestion's beginning."""
    doc = record.document
    head, tail, start = job.cursor.prefix, job.cursor.suffix, offset
    if selected is not None:
        head = head[: len(head) - len(selected.text)]
        text, start = selected.text + text, selected.start
    record.shown = Shown(head, tail, text, job.id)
    state.ledger.offered(
        Suggestion(
            job.id,
            doc.uri,
            head,
            tail,
            text,
            head_start=start - len(head),
            tail_after=len(doc.text) - offset - len(tail),
        )
    )


def inline_item(text: str, where: types.Range, suggestion_id: str) -> types.InlineCompletionItem:
    """One inline item; its command tells the server when the client accepted it (LSP clients
    run an item's command on accepting it), so even a generic client reports accepts."""
    return types.InlineCompletionItem(
        insert_text=text,
        range=where,
        command=types.Command(
            title="codespec: accepted", command="codespec.didAccept", arguments=[suggestion_id]
        ),
    )


def typed_through(shown: Shown | None, cursor: Cursor) -> tuple[str, str] | None:
    """The rest of the last completion and its id when the user has typed its beginning.

    Typing what the ghost text shows keeps showing the remainder at no model cost (as llama.vim
    and Copilot do)."""
    if shown is None:
        return None
    prefix, suffix, text, suggestion_id = shown
    if cursor.suffix != suffix or not cursor.prefix.startswith(prefix):
        return None
    typed = cursor.prefix[len(prefix) :]
    if typed and text.startswith(typed) and len(typed) < len(text):
        return text[len(typed) :], suggestion_id
    return None


def apply_multiline_policy(mode: Mode, policy: str) -> Mode:
    """The user's single/multi-line policy over the syntax decision (NONE stays NONE)."""
    if mode is Mode.BLOCK and policy == "never":
        return Mode.LINE
    if mode is Mode.LINE and policy == "always":
        return Mode.BLOCK
    return mode


def document_name(uri: str) -> str:
    """The file name a prompt shows for a document (never read: just its URI's last part)."""
    return os.path.basename(unquote(urlparse(uri).path)) or "untitled"


def neighbour_snippets(state: SessionState, record: OpenDocument, prefix: str) -> list[Snippet]:
    """The windows of the other open documents of the language family most like the code
    above the cursor, or last edited (``workspace/snippets.py``): context before the file."""
    doc = record.document
    family = FAMILIES.get(doc.language_id, {doc.language_id})
    neighbours = [
        Neighbour(
            document_name(d.uri),
            d.text,
            d.edited_line(),
            d.last_edit[1] if d.last_edit else None,
        )
        for d in (other.document for other in state.documents.values())
        if d is not doc and d.language_id in family and not d.too_large
    ]
    if not neighbours:
        return []
    return choose_snippets(prefix, neighbours, time.monotonic(), record.snippet_memory)


def schedule_warm(
    ls: CodespecServer,
    offset: int,
    record: OpenDocument,
    delay_ms: int | None = None,
    shown_next: str = "",
) -> None:
    """After ``warmDelayMs`` (or ``delay_ms``) without another edit or cursor report for the
    document, have the worker prefill the prompt a request at ``offset`` would use and compute
    ahead the next keystrokes there (see ``kinds.WarmJob``; ``shown_next``: the ghost text's
    next character there)."""
    state = ls.session
    settings = state.settings
    record.cancel_warm_up()
    if not settings.warm_ahead or not completes_in(state, record):
        return
    edits = record.edits_now()

    def submit() -> None:
        record.warm_timer = None
        if record.edits_now() != edits:
            return  # closed or edited again meanwhile: that edit scheduled its own warm-up
        options = completion_options(settings, invoked=False)
        place = place_at(ls, record, offset, options)
        ls.daemon.worker.warm(WarmJob.at(place, shown_next=shown_next))

    loop = asyncio.get_running_loop()
    delay_ms = settings.warm_delay_ms if delay_ms is None else delay_ms
    record.warm_timer = loop.call_later(delay_ms / 1000, submit)
