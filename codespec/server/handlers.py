"""The LSP handlers of a session: each a few lines over the typed server (``session_server.py``) and
pure functions (``jobs.py`` for completions, ``config.py`` for settings, ``stats/`` for the
report). ``register`` wires them into a fresh server.

pygls hands a handler the server as its first argument when that argument is named ``ls``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams

from ..stats import report
from ..stats.record import client_label
from ..stats.verdicts import COMMANDS
from .config import merge
from .counters import worker_stats
from .documents import read_position
from .folders import declare_folders
from .jobs import inline_completion, schedule_warm
from .next_edits import DID_SHOW_INLINE_EDIT, INLINE_EDIT, did_show_inline_edit, inline_edit
from .session_server import CodespecServer
from .state import open_document

log = logging.getLogger("codespec.session")
CUSTOM_INLINE = "codespec/inlineCompletion"
STATS = "codespec/stats"
DOCUMENT = "codespec/document"
CURSOR = "codespec/cursor"
STATUS = "codespec/status"  # server -> client: the engine's state (lsp/PROTOCOL.md)
MODELS = "codespec/models"
CHOOSE_MODEL = "codespec/chooseModel"


def on_initialize(ls: CodespecServer, params: types.InitializeParams) -> None:
    state = ls.session
    state.lifecycle.initialized = True  # pygls accepted it: now it counts
    state.client_pid = params.process_id
    if params.client_info is not None:
        state.client_name = client_label(params.client_info.name)
    experimental = params.capabilities.experimental
    if isinstance(experimental, dict) and experimental.get("codespecVerdicts") is True:
        state.ledger.client_reports_shown = True  # it sends codespec.didShow
    apply_settings(ls, params.initialization_options)
    declare_folders(ls, params)


async def on_initialized(ls: CodespecServer, params: types.InitializedParams) -> None:
    window = ls.client_capabilities.window
    supported = window is not None and bool(window.work_done_progress)
    # the model that runs (once loaded), or a remote engine already down
    status = ls.daemon.status
    if status.worth_telling():
        ls.protocol.notify(STATUS, status.params())
    if supported and not ls.daemon.model_ready.is_set():
        await report_loading(ls)


def on_configuration(ls: CodespecServer, params: types.DidChangeConfigurationParams) -> None:
    apply_settings(ls, params.settings)


async def on_inline(
    ls: CodespecServer, params: types.InlineCompletionParams
) -> types.InlineCompletionList:
    return await inline_completion(ls, params)


async def on_custom_inline(ls: CodespecServer, params: Any) -> types.InlineCompletionList:
    """``codespec/inlineCompletion``: the same request for clients older than LSP 3.18."""
    try:
        typed = ls.protocol._converter.structure(as_dict(params), types.InlineCompletionParams)
    except Exception:
        raise JsonRpcInvalidParams("expected InlineCompletionParams") from None
    return await inline_completion(ls, typed)


def on_cursor(ls: CodespecServer, params: Any) -> None:
    """The plugins say where the cursor rests (a document shown, a jump, a pause): warm there."""
    given = as_dict(params)
    try:
        uri = given["textDocument"]["uri"]
        position = read_position(given["position"])
    except (KeyError, TypeError, ValueError):
        log.debug("codespec/cursor with malformed params: ignored")
        return
    record = ls.session.documents.get(uri)
    if record is not None:
        offset = record.document.offset_at(position, ls.protocol.encoding)
        schedule_warm(ls, offset, record)


async def on_stats(ls: CodespecServer, params: Any) -> dict:
    """The report ``codespec stats --json`` prints (``since``, ``language``, ``by`` as there),
    with the daemon's live counters under ``daemon``."""
    return await stats_reply(ls, as_dict(params))


async def on_models(ls: CodespecServer, params: Any) -> dict:
    """The models this daemon could run (the rows ``codespec models --json`` prints), the one
    running marked ``running``."""
    return {"models": await ls.daemon.list_models()}


async def on_choose_model(ls: CodespecServer, params: Any) -> dict:
    """Switch the daemon to the model ``params.name`` (a row's name, or a GGUF file's path):
    -32602 with one line when it cannot run here; otherwise the daemon answers what is asked
    empty and runs again with it, and every session hears its status (lsp/PROTOCOL.md)."""
    given = as_dict(params)
    name = given.get("name") if isinstance(given, dict) else None
    if not isinstance(name, str) or not name or len(name) > 4096:
        raise JsonRpcInvalidParams("expected {name: a model of codespec/models}")
    try:
        return await ls.daemon.choose_model(name)
    except ValueError as exc:
        raise JsonRpcInvalidParams(str(exc)) from None


def on_document(ls: CodespecServer, params: Any) -> dict:
    """The server's copy of a document (for clients and tests to check their sync)."""
    given = as_dict(params)
    doc = open_document(ls.session, given.get("uri") if isinstance(given, dict) else None).document
    return {"uri": doc.uri, "version": doc.version, "text": doc.text}


async def on_inline_edit(ls: CodespecServer, params: Any) -> dict:
    """``textDocument/copilotInlineEdit``: the next edits around a position (``next_edits.py``)."""
    return await inline_edit(ls, as_dict(params))


def on_did_show_inline_edit(ls: CodespecServer, params: Any) -> None:
    did_show_inline_edit(ls, as_dict(params))


def verdict_handler(command: str):
    """The handler of ``codespec.didShow`` or another verdict command (lsp/PROTOCOL.md,
    "Verdicts"). pygls reads a command handler's signature to hand it the arguments, and
    resolves its annotations: the server's type is only known here while type checking, so
    ``ls`` goes unannotated."""

    def on_verdict(ls, *arguments: Any) -> None:  # noqa: ANN001
        ls.session.ledger.explicit(command, list(arguments))

    return on_verdict


FEATURES: list[tuple[str, Any, Any]] = [
    (types.INITIALIZE, on_initialize, None),
    (types.INITIALIZED, on_initialized, None),
    (types.WORKSPACE_DID_CHANGE_CONFIGURATION, on_configuration, None),
    (types.TEXT_DOCUMENT_INLINE_COMPLETION, on_inline, types.InlineCompletionOptions()),
    (CUSTOM_INLINE, on_custom_inline, None),
    (CURSOR, on_cursor, None),
    (STATS, on_stats, None),
    (DOCUMENT, on_document, None),
    (MODELS, on_models, None),
    (CHOOSE_MODEL, on_choose_model, None),
    (INLINE_EDIT, on_inline_edit, None),
    (DID_SHOW_INLINE_EDIT, on_did_show_inline_edit, None),
]


def register(ls: CodespecServer) -> None:
    for method, handler, options in FEATURES:
        ls.feature(method, options)(handler)
    for command in COMMANDS:  # advertised in executeCommandProvider by pygls
        ls.command(command)(verdict_handler(command))


# -- what the handlers stand on ----------------------------------------------------------------


def apply_settings(ls: CodespecServer, values: Any) -> None:
    """Merge ``values`` (bare, or under ``codespec``) into the session's settings; warn the user
    of each value that was refused (``config.merge`` keeps the old one)."""
    state = ls.session
    if isinstance(values, dict) and isinstance(values.get("codespec"), dict):
        values = values["codespec"]
    state.settings, problems = merge(state.settings, values or None)
    for problem in problems:
        log.warning("session %s: %s", state.id, problem)
        ls.window_show_message(
            types.ShowMessageParams(types.MessageType.Warning, f"codespec: {problem}")
        )


async def report_loading(ls: CodespecServer) -> None:
    """``$/progress`` from begin to end while the daemon loads the model."""
    token = f"codespec-loading-{ls.session.id}"
    try:
        await asyncio.wait_for(ls.work_done_progress.create_async(token), timeout=5)
    except Exception:  # the client refused or did not answer: nothing to show
        return
    ls.work_done_progress.begin(
        token, types.WorkDoneProgressBegin(title="codespec", message="loading the model")
    )
    await asyncio.to_thread(ls.daemon.model_ready.wait)
    ls.work_done_progress.end(token, types.WorkDoneProgressEnd(message="model ready"))


async def stats_reply(ls: CodespecServer, params: Any) -> dict:
    given = params if isinstance(params, dict) else {}
    since, language, by = given.get("since"), given.get("language"), given.get("by", "language")
    reply: dict = {"daemon": worker_stats(ls.daemon.worker.stats)}
    if (next_edit_model := ls.daemon.status.next_edit_model) is not None:
        reply["daemon"]["next_edit_model"] = next_edit_model
    store = ls.daemon.store
    if store is None:
        return {**reply, "store": None}

    def read_report() -> dict:  # off the event loop: a long history takes a while
        store.flush()
        return store.read(lambda conn: report.query(conn, since, language, by))

    try:
        built = await asyncio.to_thread(read_report)
    except report.ReportError as exc:
        raise JsonRpcInvalidParams(str(exc)) from None
    return {**reply, **built, "store": {"path": str(store.path), "status": store.status}}


def as_dict(params: Any) -> Any:
    """pygls hands custom-method params over as nested namedtuples; turn them back into dicts."""
    if hasattr(params, "_asdict"):
        return {k: as_dict(v) for k, v in params._asdict().items()}
    if isinstance(params, list):
        return [as_dict(v) for v in params]
    return params
