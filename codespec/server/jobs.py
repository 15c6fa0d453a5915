"""From a session's request to a job for the engine worker, and from its result to the reply.

`inline_completion` snapshots the document at the cursor, decides the kind of completion
(tree-sitter, then the user's multi-line policy), submits a job and turns its text into one
inline item, streaming `codespec/partialCompletion` meanwhile; `schedule_warm` submits the same
prompt as a warm-up once edits or the cursor rest. Everything else here is a pure helper.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

from lsprotocol import types
from pygls.exceptions import JsonRpcInternalError

from ..completion import CompletionOptions
from ..languages import language_for
from ..stats.verdicts import Suggestion
from ..stops import Cursor, Mode, decide_mode
from .config import Settings
from .documents import MAX_DOCUMENT_CHARS, Document
from .state import SessionState, open_document
from .worker import Job, ModelUnavailable, WarmJob

if TYPE_CHECKING:  # session.py builds the server and imports this module
    from .session import CodespecServer

log = logging.getLogger("codespec.session")
PARTIAL = "codespec/partialCompletion"


def completion_options(settings: Settings, invoked: bool) -> CompletionOptions:
    return CompletionOptions(
        max_tokens=settings.max_tokens,
        line_max_tokens=settings.line_max_tokens,
        max_lines=settings.max_lines,
        speculate=settings.speculate,
        stop_rules=settings.stop_rules,
        invoked=invoked,
        prefix_tokens=settings.prefix_tokens,
        suffix_tokens=settings.suffix_tokens,
        extra_tokens=settings.extra_context_tokens,
        prompt_seconds=settings.prompt_seconds,
        look_ahead_keys=settings.look_ahead_keys if settings.warm_ahead else 0,
    )


async def inline_completion(
    ls: CodespecServer, params: types.InlineCompletionParams
) -> types.InlineCompletionList:
    """Snapshot the document, run a job on the worker, answer with one inline item."""
    state = ls.session
    settings = state.settings
    uri = params.text_document.uri
    doc = open_document(state, uri)
    empty = types.InlineCompletionList(items=[])
    if not settings.enabled or doc.language_id in settings.disabled_languages:
        return empty
    if doc.too_large:
        if uri not in state.too_large_logged:
            state.too_large_logged.add(uri)
            log.info(
                "no completions in a document of %d characters (the limit is %d)",
                len(doc.text),
                MAX_DOCUMENT_CHARS,
            )
        return empty
    encoding = ls.protocol.encoding
    position = doc.clamp(params.position, encoding)  # past a line's end: at its end
    prefix, suffix = doc.split(doc.offset_at(position, encoding))
    cursor = Cursor(prefix, suffix, language_for(doc.language_id, uri))
    invoked = params.context.trigger_kind == types.InlineCompletionTriggerKind.Invoked
    options = completion_options(settings, invoked)
    options.mode = apply_multiline_policy(
        decide_mode(cursor, invoked, settings.complete_mid_word), settings.multiline
    )
    where = types.Range(position, position)
    if (through := typed_through(state.shown.get(uri), cursor)) is not None:
        rest, suggestion_id = through
        # no model run; while the user types on, compute ahead the keystrokes that leave it
        schedule_warm(ls, doc.offset_at(position, encoding), doc, delay_ms=0, shown_next=rest[0])
        return types.InlineCompletionList(items=[inline_item(rest, where, suggestion_id)])
    msg_id = ls.protocol.msg_id
    client_version = doc.version or 0
    loop = asyncio.get_running_loop()

    def on_text(partial: str) -> None:
        payload = {"id": msg_id, "uri": uri, "version": client_version, "text": partial}
        loop.call_soon_threadsafe(ls.protocol.notify, PARTIAL, payload)

    job = Job(
        state.id,
        uri,
        doc.edits,
        cursor,
        options,
        document_name(uri),
        other_documents(state, doc),
        lambda: doc.edits if state.documents.get(uri) is doc else doc.edits + 1,
        anchors=state.anchors,
        language=doc.language_id or cursor.language.name,
        on_text=on_text,
    )
    offset = doc.offset_at(position, encoding)  # where the suggestion sits, for its verdict
    head_start = offset - len(cursor.prefix)
    tail_after = len(doc.text) - offset - len(cursor.suffix)
    future = ls.worker.submit(job)
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
    if result is None or not result.text:
        return empty
    state.shown[uri] = (cursor.prefix, cursor.suffix, result.text, job.id)
    state.ledger.offered(
        Suggestion(
            job.id,
            uri,
            cursor.prefix,
            cursor.suffix,
            result.text,
            head_start=head_start,
            tail_after=tail_after,
        )
    )
    return types.InlineCompletionList(items=[inline_item(result.text, where, job.id)])


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


def typed_through(shown: tuple[str, str, str, str] | None, cursor: Cursor) -> tuple | None:
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


def other_documents(state: SessionState, doc: Document) -> tuple[tuple[str, str], ...]:
    """The other open documents of the same language: context files before the current one."""
    return tuple(
        (document_name(d.uri), d.text)
        for d in state.documents.values()
        if d is not doc and d.language_id == doc.language_id and not d.too_large
    )


def schedule_warm(
    ls: CodespecServer,
    offset: int,
    doc: Document,
    delay_ms: int | None = None,
    shown_next: str = "",
) -> None:
    """After ``warmDelayMs`` (or ``delay_ms``) without another edit or cursor report for the
    document, have the worker prefill the prompt a request at ``offset`` would use and compute
    ahead the next keystrokes there (see ``worker.WarmJob``; ``shown_next``: the ghost text's
    next character there)."""
    state = ls.session
    settings = state.settings
    uri = doc.uri
    if (timer := state.warm_timers.pop(uri, None)) is not None:
        timer.cancel()
    if not (settings.enabled and settings.warm_ahead) or doc.too_large:
        return
    if doc.language_id in settings.disabled_languages:
        return
    edits = doc.edits

    def submit() -> None:
        state.warm_timers.pop(uri, None)
        if state.documents.get(uri) is not doc or doc.edits != edits:
            return  # closed or edited again meanwhile: that edit scheduled its own warm-up
        prefix, suffix = doc.split(max(0, min(offset, len(doc.text))))
        ls.worker.warm(
            WarmJob(
                state.id,
                uri,
                edits,
                Cursor(prefix, suffix, language_for(doc.language_id, uri)),
                completion_options(settings, invoked=False),
                document_name(uri),
                other_documents(state, doc),
                lambda: doc.edits,
                anchors=state.anchors,
                shown_next=shown_next,
            )
        )

    loop = asyncio.get_running_loop()
    delay_ms = settings.warm_delay_ms if delay_ms is None else delay_ms
    state.warm_timers[uri] = loop.call_later(delay_ms / 1000, submit)
