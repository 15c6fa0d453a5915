"""One editor connection = one LSP session (pygls), all sharing the daemon's engine worker.

Handlers are thin: they look up the session's own copy of an open document and hand it to
``jobs.py``, which builds a job for the worker and turns its result into LSP types. What a
session keeps lives in ``state.py``, the raw-message rules pygls lacks in ``lifecycle.py``,
text sync and positions in ``documents.py``. A session only ever sees the
documents its client opened: nothing is read from disk, whatever a URI names.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcInternalError, JsonRpcInvalidParams
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.language_server import lsp_method

from ..stats import report
from ..stats.store import Store
from ..stats.verdicts import COMMANDS, Ledger
from .config import Settings, merge
from .documents import Document, change_end_offset
from .framing import FramingError, check_message, error_reply, frame, read_frame
from .jobs import inline_completion, schedule_warm
from .lifecycle import DROP, admit, normalize
from .state import SessionState, open_document
from .worker import Worker

log = logging.getLogger("codespec.session")
CUSTOM_INLINE = "codespec/inlineCompletion"
STATS = "codespec/stats"
DOCUMENT = "codespec/document"
CURSOR = "codespec/cursor"
PID_MAX = 1 << 22  # Linux's largest pid_max


class CodespecServer(LanguageServer):
    """One session's pygls server, with what its handlers use declared: the session's state,
    the daemon's worker and its stats store."""

    protocol: CodespecProtocol

    def __init__(self, state: SessionState, worker: Worker, store: Store | None = None) -> None:
        super().__init__("codespec", "0.1.0", protocol_cls=CodespecProtocol)
        self.session = state
        self.worker = worker
        self.store = store
        self.protocol.session = state

    def report_server_error(self, error: Exception, source: Any) -> None:
        """pygls would show the editor a message with Python exception text; log it instead
        (a bad notification is the client's problem, not the user's)."""
        log.debug("session error (%s): %s", getattr(source, "__name__", source), error)


class CodespecProtocol(LanguageServerProtocol):
    """pygls's protocol, made safe to share a process with other sessions; documents are kept
    in the session (``documents.py``), not in pygls's workspace, which would read a URI it
    does not know from disk."""

    session: SessionState
    _server: CodespecServer

    @property
    def encoding(self) -> str:
        return str(getattr(self._workspace, "position_encoding", None) or "utf-16")

    @lsp_method(types.EXIT)
    def lsp_exit(self, *args: Any) -> None:
        """End this session only (plain pygls would exit the process: the daemon serves others)."""
        self.session.exited = True
        if self.writer is not None:
            self.writer.close()

    @lsp_method(types.TEXT_DOCUMENT_DID_OPEN)
    def lsp_text_document__did_open(self, params: types.DidOpenTextDocumentParams) -> None:
        item = params.text_document
        self.session.documents[item.uri] = Document(
            item.uri, item.text, item.version, item.language_id or ""
        )

    @lsp_method(types.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: types.DidChangeTextDocumentParams) -> None:
        doc = self.session.documents.get(params.text_document.uri)
        if doc is None:
            log.debug("didChange for a document that is not open: ignored")
            return
        for change in params.content_changes:
            doc.apply(change, self.encoding)
        doc.version = params.text_document.version
        self.session.ledger.document_changed(doc.uri, doc.text)  # accepted? typed over?
        if params.content_changes:  # edits settle where the last change ended: warm there
            offset = change_end_offset(doc, params.content_changes[-1], self.encoding)
            if offset is not None:
                schedule_warm(self._server, offset, doc)

    @lsp_method(types.TEXT_DOCUMENT_DID_CLOSE)
    def lsp_text_document__did_close(self, params: types.DidCloseTextDocumentParams) -> None:
        uri = params.text_document.uri
        state = self.session
        state.documents.pop(uri, None)
        state.anchors.pop(uri, None)
        state.shown.pop(uri, None)
        state.ledger.document_closed(uri)
        if (timer := state.warm_timers.pop(uri, None)) is not None:
            timer.cancel()
        self._server.worker.forget_document(state.id, uri)

    def _send_data(self, data: Any) -> None:
        error = getattr(data, "error", None)
        if error is not None and error.data is not None:
            # pygls made this reply from a Python exception: its text names exception classes
            # and its data holds a traceback with file paths. Both stay in the log.
            error.data = None
            if error.code == JsonRpcInternalError.CODE:
                error.message = "internal error (details in the daemon log)"
        super()._send_data(data)


def create_session(
    worker: Worker,
    defaults: Settings,
    model_ready: threading.Event | None = None,
    store: Store | None = None,
) -> CodespecServer:
    """A fresh server for one connection, with codespec's handlers registered."""
    state = SessionState(settings=defaults)
    if store is not None:
        state.ledger = Ledger(store.put_verdict)
    ls = CodespecServer(state, worker, store)

    @ls.feature(types.INITIALIZE)
    def on_initialize(params: types.InitializeParams) -> None:
        state.lifecycle.initialized = True  # pygls accepted it: now it counts
        state.client_pid = params.process_id
        experimental = params.capabilities.experimental
        if isinstance(experimental, dict) and experimental.get("codespecVerdicts") is True:
            state.ledger.client_reports_shown = True  # it sends codespec.didShow
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
        return await inline_completion(ls, params)

    @ls.feature(CUSTOM_INLINE)
    async def on_custom_inline(params: Any) -> types.InlineCompletionList:
        try:
            typed = ls.protocol._converter.structure(_as_dict(params), types.InlineCompletionParams)
        except Exception:
            raise JsonRpcInvalidParams("expected InlineCompletionParams") from None
        return await inline_completion(ls, typed)

    @ls.feature(CURSOR)
    def on_cursor(params: Any) -> None:
        """The plugins say where the cursor rests (a document shown, a jump, a pause)."""
        given = _as_dict(params)
        try:
            uri = given["textDocument"]["uri"]
            position = types.Position(
                line=int(given["position"]["line"]), character=int(given["position"]["character"])
            )
        except (KeyError, TypeError, ValueError):
            log.debug("codespec/cursor with malformed params: ignored")
            return
        doc = state.documents.get(uri)
        if doc is not None:
            schedule_warm(ls, doc.offset_at(position, ls.protocol.encoding), doc)

    @ls.feature(STATS)
    async def on_stats(params: Any) -> dict:
        """The report ``codespec stats --json`` prints (``since``, ``language``, ``by`` as
        there), with the daemon's live counters under ``daemon``."""
        return await stats_reply(worker, store, _as_dict(params))

    def verdict_command(command: str):
        def on_command(*arguments) -> None:
            state.ledger.explicit(command, list(arguments))

        return on_command

    for command in COMMANDS:  # advertised in executeCommandProvider by pygls
        ls.command(command)(verdict_command(command))

    @ls.feature(DOCUMENT)
    def on_document(params: Any) -> dict:
        """The server's copy of a document (for clients and tests to check their sync)."""
        given = _as_dict(params)
        uri = given.get("uri") if isinstance(given, dict) else None
        doc = open_document(state, uri)
        return {"uri": doc.uri, "version": doc.version, "text": doc.text}

    return ls


async def stats_reply(worker: Worker, store: Store | None, params: Any) -> dict:
    given = params if isinstance(params, dict) else {}
    since, language, by = given.get("since"), given.get("language"), given.get("by", "language")
    reply: dict = {"daemon": worker_stats(worker)}
    if store is None:
        return {**reply, "store": None}

    def read_report() -> dict:  # off the event loop: a long history takes a while
        store.flush()
        return store.read(lambda conn: report.query(conn, since, language, by))[1]

    try:
        built = await asyncio.to_thread(read_report)
    except report.ReportError as exc:
        raise JsonRpcInvalidParams(str(exc)) from None
    return {**reply, **built, "store": {"path": str(store.path), "status": store.status}}


async def report_loading(ls: CodespecServer, model_ready: threading.Event) -> None:
    """``$/progress`` from begin to end while the daemon loads the model."""
    token = f"codespec-loading-{ls.session.id}"
    try:
        await asyncio.wait_for(ls.work_done_progress.create_async(token), timeout=5)
    except Exception:  # the client refused or did not answer: nothing to show
        return
    ls.work_done_progress.begin(
        token, types.WorkDoneProgressBegin(title="codespec", message="loading the model")
    )
    await asyncio.to_thread(model_ready.wait)
    ls.work_done_progress.end(token, types.WorkDoneProgressEnd(message="model ready"))


def apply_settings(ls: CodespecServer, values: Any) -> None:
    state = ls.session
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
        "dropped": s.dropped,
        "expired": s.expired,
        "warmed": s.warmed,
        "warm_tokens": s.warm_tokens,
        "warm_preempted": s.warm_preempted,
        "looked_ahead": s.looked_ahead,
        "ahead_rows": s.ahead_rows,
        "ahead_hits": s.ahead_hits,
    }


async def serve_connection(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, ls: CodespecServer
) -> None:
    """Read frames until EOF (or non-LSP bytes); check each message (``lifecycle.admit``)
    and dispatch it to the session's protocol. Every request gets exactly one reply."""
    protocol = ls.protocol
    state = protocol.session
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
                verdict = admit(state.lifecycle, message)
                if verdict == DROP:
                    log.debug("dropped %s before initialize", message.get("method"))
                    continue
                if isinstance(verdict, dict):
                    error = verdict
            if error is not None:
                writer.write(frame(error))
                continue
            dispatch(protocol, normalize(message), writer)
            if state.exited:
                break
    finally:
        watcher.cancel()
        for timer in state.warm_timers.values():
            timer.cancel()  # no warm-up for a session that has ended
        state.ledger.end()  # what is still shown was left unaccepted
        writer.close()


def dispatch(protocol: Any, message: dict, writer: asyncio.StreamWriter) -> None:
    """Hand one admitted message to pygls; params it cannot read get -32602 (requests) or a
    debug line (notifications), never a traceback to the client."""
    try:
        text = json.dumps(message)
        protocol.handle_message(json.loads(text, object_hook=protocol.structure_message))
    except Exception as exc:
        method, msg_id = message.get("method"), message.get("id")
        log.debug("cannot read the params of %s: %s", method, exc)
        if msg_id is not None and method:
            writer.write(frame(error_reply(msg_id, -32602, f"Invalid params for {method}")))


async def _watch_client(ls: CodespecServer, writer: asyncio.StreamWriter) -> None:
    """End the session when the editor process named in ``initialize`` is gone."""
    while True:
        await asyncio.sleep(2.0)
        pid = ls.session.client_pid
        if isinstance(pid, int) and 0 < pid <= PID_MAX:  # 0 and -1 name groups, not a process
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                log.info("client process %s is gone; ending its session", pid)
                writer.close()
                return
            except PermissionError:
                pass
