"""One editor connection = one LSP session (pygls), all sharing the daemon's engine worker.

This module is the connection: the protocol's document sync, reading frames and dispatching
them. The handlers are module functions over the typed server (``session_server.py``) in
``handlers.py``; ``jobs.py`` turns a request into a job for the worker and its result into LSP
types. What a session keeps lives in ``state.py`` (one record per open document), the
raw-message rules pygls lacks in ``lifecycle.py``, text sync and positions in
``documents.py``. A session only ever sees the documents its client opened: nothing is read
from disk, whatever a URI names.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcInternalError
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.language_server import lsp_method

from ..stats.verdicts import Ledger
from . import folders, handlers
from .config import Settings
from .documents import Document, change_end_offset
from .framing import FramingError, check_message, error_reply, frame, read_frame
from .jobs import schedule_warm
from .lifecycle import DROP, admit, normalize, plain_strings
from .session_server import CodespecServer
from .state import OpenDocument, SessionState
from .view import DaemonView

log = logging.getLogger("codespec.session")
PID_MAX = 1 << 22  # Linux's largest pid_max
# replies a client has left unread when the next one is due: past this it is disconnected (a
# client that reads holds next to none, whatever the size of one reply)
MAX_UNREAD_BYTES = 16 << 20
# a didChange whose edits may copy more characters than this (its changes times the document's
# length) is applied on a thread, so that the event loop serves other sessions meanwhile
OFF_LOOP_EDIT_CHARS = 8_000_000


class CodespecProtocol(LanguageServerProtocol):
    """pygls's protocol, made safe to share a process with other sessions; documents are kept
    in the session (``documents.py``), not in pygls's workspace, which would read a URI it
    does not know from disk."""

    _server: CodespecServer  # pyright: ignore[reportIncompatibleVariableOverride]  (the subclass it serves)

    @property
    def session(self) -> SessionState:
        return self._server.session

    @property
    def encoding(self) -> str:
        return str(getattr(self._workspace, "position_encoding", None) or "utf-16")

    @lsp_method(types.EXIT)
    def lsp_exit(self, *args: Any) -> None:  # pyright: ignore[reportIncompatibleMethodOverride]  (pygls registers it by name; it returns nothing)
        """End this session only (plain pygls would exit the process: the daemon serves others)."""
        self.session.exited = True
        if self.writer is not None:
            self.writer.close()

    @lsp_method(types.WORKSPACE_DID_CHANGE_WORKSPACE_FOLDERS)
    def lsp_workspace__did_change_workspace_folders(  # pyright: ignore[reportIncompatibleMethodOverride]  (pygls registers it by name; it returns nothing)
        self, params: types.DidChangeWorkspaceFoldersParams
    ) -> None:
        """The folders the client works in changed (advertised as ``changeNotifications``):
        the session's folders follow, within the same rules as ``initialize``'s."""
        folders.change_folders(self._server, params)

    @lsp_method(types.TEXT_DOCUMENT_DID_OPEN)
    def lsp_text_document__did_open(self, params: types.DidOpenTextDocumentParams) -> None:  # pyright: ignore[reportIncompatibleMethodOverride]  (pygls registers it by name; it returns nothing)
        item = params.text_document
        doc = Document(item.uri, item.text, item.version, item.language_id or "")
        self.session.opened(doc)
        folders.document_opened(self._server, doc)

    @lsp_method(types.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: types.DidChangeTextDocumentParams) -> None:  # pyright: ignore[reportIncompatibleMethodOverride]  (pygls registers it by name; it returns nothing)
        record = self.session.documents.get(params.text_document.uri)
        if record is None:
            log.debug("didChange for a document that is not open: ignored")
            return
        for change in params.content_changes:
            record.document.apply(change, self.encoding)
        self.changed(record, params)

    async def change_off_loop(self, message: dict) -> None:
        """A costly didChange (``costly_change``): read and applied to a copy on a thread. This
        session reads its next message only once the copy is in place, so nothing of it
        overtakes the edit."""
        record = self.session.documents[message["params"]["textDocument"]["uri"]]
        doc = record.document

        def read_and_apply() -> tuple[types.DidChangeTextDocumentParams, Document] | None:
            try:
                params = self._converter.structure(
                    plain_strings(message["params"]), types.DidChangeTextDocumentParams
                )
                return params, doc.edited(params.content_changes, self.encoding)
            except Exception as exc:  # (as pygls treats a notification it cannot handle)
                log.debug("cannot apply a didChange: %s", exc)
                return None

        done = await asyncio.to_thread(read_and_apply)
        if done is not None:
            params, edited = done
            doc.take(edited)
            self.changed(record, params)

    def changed(self, record: OpenDocument, params: types.DidChangeTextDocumentParams) -> None:
        """After a didChange was applied: its version, the verdicts, a warm-up where it ended."""
        doc = record.document
        doc.version = params.text_document.version
        self.session.ledger.document_changed(doc.uri, doc.text)  # accepted? typed over?
        if params.content_changes:  # edits settle where the last change ended: warm there
            offset = change_end_offset(doc, params.content_changes[-1], self.encoding)
            if offset is not None:
                schedule_warm(self._server, offset, record)

    @lsp_method(types.TEXT_DOCUMENT_DID_CLOSE)
    def lsp_text_document__did_close(self, params: types.DidCloseTextDocumentParams) -> None:  # pyright: ignore[reportIncompatibleMethodOverride]  (pygls registers it by name; it returns nothing)
        uri = params.text_document.uri
        state = self.session
        if (closed := state.closed(uri)) is not None:
            # its last text, as the editor had it
            folders.document_opened(self._server, closed.document)
        state.ledger.document_closed(uri)
        self._server.daemon.worker.forget_document(state.id, uri)

    def _send_data(self, data: Any) -> None:
        error = getattr(data, "error", None)
        if error is not None and error.data is not None:
            # pygls made this reply from a Python exception: its text names exception classes
            # and its data holds a traceback with file paths. Both stay in the log.
            error.data = None
            if error.code == JsonRpcInternalError.CODE:
                error.message = "internal error (details in the daemon log)"
        transport = getattr(self.writer, "transport", None)
        if transport is not None and transport.is_closing():
            return  # (disconnected: nothing more is sent, or built for it)
        if transport is not None and transport.get_write_buffer_size() > MAX_UNREAD_BYTES:
            # a client that has not read what was sent before: its replies would pile up here
            log.warning("session %s does not read its replies; disconnecting it", self.session.id)
            self.session.exited = True  # what it already sent is not served either
            transport.abort()
            return
        super()._send_data(data)


def create_session(daemon: DaemonView, defaults: Settings) -> CodespecServer:
    """A fresh server for one connection, with codespec's handlers (``handlers.py``)."""
    state = SessionState(settings=defaults)
    if daemon.store is not None:
        state.ledger = Ledger(daemon.store.put_verdict)
    ls = CodespecServer(state, daemon, CodespecProtocol)
    state.ledger.on_taken = functools.partial(folders.learn_accepted, ls)
    handlers.register(ls)
    return ls


async def serve_connection(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, ls: CodespecServer
) -> None:
    """Read frames until EOF (or non-LSP bytes); check each message (``lifecycle.admit``)
    and dispatch it to the session's protocol. Every request gets exactly one reply."""
    protocol = ls.protocol
    assert isinstance(protocol, CodespecProtocol)  # (create_session made it so)
    state = ls.session
    protocol.set_writer(writer)  # type: ignore[arg-type]  (an asyncio StreamWriter: pygls only calls write and close)
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
            if message is not None:
                verdict = admit(state.lifecycle, message)
                if verdict == DROP:
                    log.debug("dropped %s before initialize", message.get("method"))
                    continue
                if isinstance(verdict, dict):
                    error = verdict
            if error is not None:
                writer.write(frame(error))
                continue
            if message is None:
                continue
            if costly_change(state, message):
                await protocol.change_off_loop(message)
            else:
                dispatch(protocol, normalize(message), writer)
            if state.exited:
                break
    finally:
        watcher.cancel()
        state.end()  # no warm-up for a session that has ended
        state.ledger.end()  # what is still shown was left unaccepted
        writer.close()


def costly_change(state: SessionState, message: dict) -> bool:
    """Whether ``message`` is a didChange that may copy more than ``OFF_LOOP_EDIT_CHARS``."""
    if message.get("method") != types.TEXT_DOCUMENT_DID_CHANGE:
        return False
    params = message.get("params")
    if not isinstance(params, dict) or not isinstance(params.get("textDocument"), dict):
        return False
    changes, uri = params.get("contentChanges"), params["textDocument"].get("uri")
    record = state.documents.get(uri) if isinstance(uri, str) else None
    if record is None or not isinstance(changes, list):
        return False
    return len(changes) * max(len(record.document.text), 1) > OFF_LOOP_EDIT_CHARS


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
