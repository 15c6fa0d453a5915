"""One editor connection = one LSP session (pygls), all sharing the daemon's engine worker.

Handlers are thin: they snapshot the document, build a job for the worker and turn its result
into LSP types. The protocol subclass adds what plain pygls lacks: -32002 before ``initialize``,
-32600 for a second ``initialize`` or after ``shutdown``, and utf-8 positions when offered.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import threading
from dataclasses import dataclass, field
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcInternalError
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.language_server import lsp_method

from ..completion import CompletionOptions
from ..languages import language_for
from ..stops import Cursor, Mode, decide_mode
from .config import Settings, merge
from .framing import FramingError, check_message, error_reply, frame, read_frame
from .worker import Job, WarmJob, Worker

log = logging.getLogger("codespec.session")
PARTIAL = "codespec/partialCompletion"
CUSTOM_INLINE = "codespec/inlineCompletion"
STATS = "codespec/stats"
DOCUMENT = "codespec/document"
CURSOR = "codespec/cursor"
_ids = itertools.count(1)


@dataclass
class SessionState:
    id: int = field(default_factory=lambda: next(_ids))
    initialized: bool = False
    shutdown: bool = False
    exited: bool = False
    settings: Settings = field(default_factory=Settings)
    client_pid: int | None = None
    anchors: dict = field(default_factory=dict)  # uri -> prompt.Anchor (used by the worker)
    shown: dict = field(default_factory=dict)  # uri -> (prefix, suffix, completion) last answered
    warm_timers: dict = field(default_factory=dict)  # uri -> asyncio.TimerHandle


class CodespecProtocol(LanguageServerProtocol):
    """pygls's protocol, made safe to share a process with other sessions."""

    session: SessionState

    @lsp_method(types.EXIT)
    def lsp_exit(self, *args: Any) -> None:
        """End this session only (plain pygls would exit the process: the daemon serves others)."""
        self.session.exited = True
        if self.writer is not None:
            self.writer.close()

    def _send_data(self, data: Any) -> None:
        error = getattr(data, "error", None)
        if error is not None and getattr(error, "data", None) is not None:
            error.data = None  # pygls attaches tracebacks with file paths: keep them in the log
        super()._send_data(data)


def lifecycle_error(state: SessionState, message: dict) -> dict | None:
    """The LSP lifecycle errors plain pygls does not send, for a raw incoming message."""
    method, msg_id = message.get("method"), message.get("id")
    if method is None or msg_id is None:  # notifications and responses pass
        return None
    if method == types.INITIALIZE:
        if state.initialized:
            return error_reply(msg_id, -32600, "initialize was already called")
        state.initialized = True
        return None
    if not state.initialized:
        return error_reply(msg_id, -32002, "the server is not initialized yet")
    if state.shutdown:
        return error_reply(msg_id, -32600, "the server is shutting down")
    if method == types.SHUTDOWN:
        state.shutdown = True
    return None


def prefer_utf8(message: dict) -> None:
    """Pick utf-8 when the client offers it (fewer conversions); utf-16 stays the default."""
    general = ((message.get("params") or {}).get("capabilities") or {}).get("general") or {}
    encodings = general.get("positionEncodings")
    if isinstance(encodings, list) and "utf-8" in encodings:
        encodings.remove("utf-8")
        encodings.insert(0, "utf-8")


def create_session(
    worker: Worker, defaults: Settings, model_ready: threading.Event | None = None
) -> LanguageServer:
    """A fresh LanguageServer for one connection, with codespec's handlers registered."""
    ls = LanguageServer("codespec", "0.1.0", protocol_cls=CodespecProtocol)
    state = SessionState(settings=defaults)
    ls.protocol.session = state  # type: ignore[attr-defined]
    ls.session = state  # type: ignore[attr-defined]

    @ls.feature(types.INITIALIZE)
    def on_initialize(params: types.InitializeParams) -> None:
        state.client_pid = params.process_id
        apply_settings(ls, params.initialization_options)

    @ls.feature(types.INITIALIZED)
    async def on_initialized(params: types.InitializedParams) -> None:
        window = ls.client_capabilities.window
        supported = window is not None and bool(window.work_done_progress)
        if supported and model_ready is not None and not model_ready.is_set():
            await report_loading(ls, model_ready)

    @ls.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    def on_configuration(params: types.DidChangeConfigurationParams) -> None:
        settings = params.settings
        if isinstance(settings, dict) and isinstance(settings.get("codespec"), dict):
            settings = settings["codespec"]
        apply_settings(ls, settings)

    @ls.feature(types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionOptions())
    async def on_inline(params: types.InlineCompletionParams) -> types.InlineCompletionList:
        return await inline_completion(ls, worker, params)

    @ls.feature(CUSTOM_INLINE)
    async def on_custom_inline(params: Any) -> types.InlineCompletionList:
        typed = ls.protocol._converter.structure(_as_dict(params), types.InlineCompletionParams)
        return await inline_completion(ls, worker, typed)

    @ls.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def on_close(params: types.DidCloseTextDocumentParams) -> None:
        uri = params.text_document.uri
        state.anchors.pop(uri, None)
        state.shown.pop(uri, None)
        if (timer := state.warm_timers.pop(uri, None)) is not None:
            timer.cancel()
        worker.forget_document(state.id, uri)

    @ls.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def on_change(params: types.DidChangeTextDocumentParams) -> None:
        """Edits settle where the last change ended: warm the prompt for that place."""
        change = params.content_changes[-1] if params.content_changes else None
        if isinstance(change, types.TextDocumentContentChangePartial):
            doc = ls.workspace.get_text_document(params.text_document.uri)
            offset = doc.offset_at_position(change.range.start) + len(change.text)
            schedule_warm(ls, worker, doc.uri, offset)

    @ls.feature(CURSOR)
    def on_cursor(params: Any) -> None:
        """The plugins say where the cursor rests (a document shown, a jump, a pause)."""
        given = _as_dict(params)
        uri = given["textDocument"]["uri"]
        doc = ls.workspace.get_text_document(uri)
        position = types.Position(**given["position"])
        schedule_warm(ls, worker, uri, doc.offset_at_position(position))

    @ls.feature(STATS)
    def on_stats(params: Any) -> dict:
        return worker_stats(worker)

    @ls.feature(DOCUMENT)
    def on_document(params: Any) -> dict:
        """The server's copy of a document (for clients and tests to check their sync)."""
        doc = ls.workspace.get_text_document(_as_dict(params)["uri"])
        return {"uri": doc.uri, "version": doc.version, "text": doc.source}

    return ls


def schedule_warm(ls: LanguageServer, worker: Worker, uri: str, offset: int) -> None:
    """After ``warmDelayMs`` without another edit or cursor report for the document, have the
    worker prefill the prompt a request at ``offset`` would use (see ``worker.WarmJob``)."""
    state: SessionState = ls.session  # type: ignore[attr-defined]
    settings = state.settings
    if (timer := state.warm_timers.pop(uri, None)) is not None:
        timer.cancel()
    doc = ls.workspace.text_documents.get(uri)
    if doc is None or not (settings.enabled and settings.warm_ahead):
        return
    if doc.language_id in settings.disabled_languages:
        return

    def submit() -> None:
        state.warm_timers.pop(uri, None)
        current = ls.workspace.text_documents.get(uri)
        if current is None or current.version != doc.version:
            return  # edited again meanwhile: that edit scheduled its own warm-up
        text = current.source
        at = max(0, min(offset, len(text)))
        worker.warm(
            WarmJob(
                state.id,
                uri,
                current.version or 0,
                Cursor(text[:at], text[at:], language_for(current.language_id, uri)),
                completion_options(settings, invoked=False),
                os.path.basename(current.path),
                other_documents(ls, uri),
                lambda: _version_of(ls, uri),
                anchors=state.anchors,
            )
        )

    loop = asyncio.get_running_loop()
    state.warm_timers[uri] = loop.call_later(settings.warm_delay_ms / 1000, submit)


def _version_of(ls: LanguageServer, uri: str) -> int | None:
    doc = ls.workspace.text_documents.get(uri)
    return None if doc is None else doc.version


def other_documents(ls: LanguageServer, uri: str) -> tuple[tuple[str, str], ...]:
    """The other open documents of the same language: context files before the current one."""
    doc = ls.workspace.get_text_document(uri)
    return tuple(
        (os.path.basename(d.path), d.source)
        for u, d in ls.workspace.text_documents.items()
        if u != uri and d.language_id == doc.language_id
    )


async def report_loading(ls: LanguageServer, model_ready: threading.Event) -> None:
    """``$/progress`` from begin to end while the daemon loads the model."""
    token = f"codespec-loading-{ls.session.id}"  # type: ignore[attr-defined]
    try:
        await asyncio.wait_for(ls.work_done_progress.create_async(token), timeout=5)
    except Exception:  # the client refused or did not answer: nothing to show
        return
    ls.work_done_progress.begin(
        token, types.WorkDoneProgressBegin(title="codespec", message="loading the model")
    )
    await asyncio.to_thread(model_ready.wait)
    ls.work_done_progress.end(token, types.WorkDoneProgressEnd(message="model ready"))


def apply_settings(ls: LanguageServer, values: Any) -> None:
    state: SessionState = ls.session  # type: ignore[attr-defined]
    if isinstance(values, dict) and isinstance(values.get("codespec"), dict):
        values = values["codespec"]
    state.settings, problems = merge(state.settings, values or None)
    for problem in problems:
        log.warning("session %s: %s", state.id, problem)
        ls.window_show_message(
            types.ShowMessageParams(types.MessageType.Warning, f"codespec: {problem}")
        )


def _as_dict(params: Any) -> Any:
    """pygls hands custom-method params over as nested namedtuples; turn them back into dicts."""
    if hasattr(params, "_asdict"):
        return {k: _as_dict(v) for k, v in params._asdict().items()}
    if isinstance(params, list):
        return [_as_dict(v) for v in params]
    return params


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
    )


async def inline_completion(
    ls: LanguageServer, worker: Worker, params: types.InlineCompletionParams
) -> types.InlineCompletionList:
    """Snapshot the document, run a job on the worker, answer with one inline item."""
    state: SessionState = ls.session  # type: ignore[attr-defined]
    settings = state.settings
    uri = params.text_document.uri
    doc = ls.workspace.get_text_document(uri)
    language = language_for(doc.language_id, doc.uri)
    empty = types.InlineCompletionList(items=[])
    if not settings.enabled or doc.language_id in settings.disabled_languages:
        return empty
    text = doc.source
    offset = doc.offset_at_position(params.position)
    cursor = Cursor(text[:offset], text[offset:], language)
    invoked = params.context.trigger_kind == types.InlineCompletionTriggerKind.Invoked
    options = completion_options(settings, invoked)
    options.mode = apply_multiline_policy(
        decide_mode(cursor, invoked, settings.complete_mid_word), settings.multiline
    )
    where = types.Range(params.position, params.position)
    if (rest := typed_through(state.shown.get(uri), cursor)) is not None:
        return types.InlineCompletionList(
            items=[types.InlineCompletionItem(insert_text=rest, range=where)]
        )
    msg_id = ls.protocol.msg_id
    version = doc.version or 0
    loop = asyncio.get_running_loop()

    def on_text(partial: str) -> None:
        payload = {"id": msg_id, "uri": uri, "version": version, "text": partial}
        loop.call_soon_threadsafe(ls.protocol.notify, PARTIAL, payload)

    def current_version() -> int | None:
        return ls.workspace.get_text_document(uri).version

    job = Job(
        state.id,
        uri,
        version,
        cursor,
        options,
        os.path.basename(doc.path),
        other_documents(ls, uri),
        current_version,
        anchors=state.anchors,
        on_text=on_text,
    )
    future = worker.submit(job)
    try:
        result = await asyncio.wrap_future(future)
    except asyncio.CancelledError:
        job.cancel.set()  # $/cancelRequest: stop the decode loop before its next target pass
        raise
    except Exception as exc:
        log.exception("completion failed")
        raise JsonRpcInternalError(f"completion failed: {type(exc).__name__}: {exc}") from None
    if result is None or not result.text:
        return empty
    state.shown[uri] = (cursor.prefix, cursor.suffix, result.text)
    return types.InlineCompletionList(
        items=[types.InlineCompletionItem(insert_text=result.text, range=where)]
    )


def typed_through(shown: tuple[str, str, str] | None, cursor: Cursor) -> str | None:
    """The rest of the last completion when the user has typed its beginning, else None.

    Typing what the ghost text shows keeps showing the remainder at no model cost (as llama.vim
    and Copilot do)."""
    if shown is None:
        return None
    prefix, suffix, text = shown
    if cursor.suffix != suffix or not cursor.prefix.startswith(prefix):
        return None
    typed = cursor.prefix[len(prefix) :]
    if typed and text.startswith(typed) and len(typed) < len(text):
        return text[len(typed) :]
    return None


def apply_multiline_policy(mode: Mode, policy: str) -> Mode:
    """The user's single/multi-line policy over the syntax decision (NONE stays NONE)."""
    if mode is Mode.BLOCK and policy == "never":
        return Mode.LINE
    if mode is Mode.LINE and policy == "always":
        return Mode.BLOCK
    return mode


def worker_stats(worker: Worker) -> dict:
    s = worker.stats
    latencies = sorted(s.latencies_s)
    return {
        "served": s.served,
        "cancelled": s.cancelled,
        "stale": s.stale,
        "failed": s.failed,
        "tokens": s.tokens,
        "passes": s.passes,
        "tokens_per_pass": s.tokens / s.passes if s.passes else None,
        "latency_p50_ms": 1000 * latencies[len(latencies) // 2] if latencies else None,
        "last_cancel": dict(s.last_cancel),
        "last_prompt": dict(s.last_prompt),
        "warmed": s.warmed,
        "warm_tokens": s.warm_tokens,
        "warm_preempted": s.warm_preempted,
    }


async def serve_connection(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, ls: LanguageServer
) -> None:
    """Read frames until EOF (or non-LSP bytes) and dispatch them to the session's protocol."""
    protocol = ls.protocol
    protocol.set_writer(writer)  # type: ignore[arg-type]
    watcher = asyncio.ensure_future(_watch_client(ls, writer))
    try:
        while True:
            try:
                body = await read_frame(reader)
            except FramingError as exc:
                log.warning("closing connection: %s", exc)
                break
            if body is None:
                break
            message, error = check_message(body)
            if error is None:
                error = lifecycle_error(protocol.session, message)
            if error is not None:
                writer.write(frame(error))
                continue
            if message.get("method") == types.INITIALIZE:
                prefer_utf8(message)
                body = json.dumps(message).encode("utf-8")
            try:
                protocol.handle_message(json.loads(body, object_hook=protocol.structure_message))
            except Exception as exc:  # bad params and the like: answer, never crash
                if message.get("id") is not None and message.get("method"):
                    reply = error_reply(message["id"], -32602, f"Invalid params: {exc}")
                    writer.write(frame(reply))
            if protocol.session.exited:
                break
    finally:
        watcher.cancel()
        for timer in protocol.session.warm_timers.values():
            timer.cancel()  # no warm-up for a session that has ended
        writer.close()


async def _watch_client(ls: LanguageServer, writer: asyncio.StreamWriter) -> None:
    """End the session when the editor process named in ``initialize`` is gone."""
    while True:
        await asyncio.sleep(2.0)
        pid = ls.session.client_pid  # type: ignore[attr-defined]
        if pid:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                log.info("client process %s is gone; ending its session", pid)
                writer.close()
                return
            except PermissionError:
                pass
