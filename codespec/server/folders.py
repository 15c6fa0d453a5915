"""A session's workspace folders: the folders its client declared, their indexes (shared
through the daemon's ``workspace.index.Workspaces``), and the cross-file context a request gets
from them (the reading and indexing itself is the ``workspace`` package's).

The index reads files from disk only below the declared folders and only while the
``workspaceContext`` setting is on and the client has not said the folders are untrusted
(``lsp/PROTOCOL.md``, "What the daemon reads"). Documents the client opens are indexed from the
client's text, not the disk's.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any
from urllib.parse import unquote, urlparse

from ..completion import CompletionOptions, definition_chars
from ..engine.corpus import TokenCorpus
from ..stats.verdicts import Suggestion
from ..workspace.accepted import AcceptedCompletions
from ..workspace.context import as_files, choose_chunks
from ..workspace.index import WorkspaceIndex
from ..workspace.reading import language_of
from .documents import Document
from .session_server import CodespecServer
from .state import OpenDocument

log = logging.getLogger("codespec.session")
MAX_FOLDERS = 8  # folders one session may declare; more are ignored


def local_path(uri: Any) -> str | None:
    """The local path of a ``file:`` URI, or None for anything else."""
    if not isinstance(uri, str):
        return None
    parsed = urlparse(uri)
    if parsed.scheme != "file" or parsed.netloc not in ("", "localhost"):
        return None
    path = unquote(parsed.path)
    return path if path.startswith("/") and "\0" not in path else None


def declare_folders(ls: CodespecServer, params: Any) -> None:
    """Remember the workspace folders ``initialize`` declared (``workspaceFolders``, else
    ``rootUri``, else ``rootPath``) and whether the client trusts them."""
    state = ls.session
    folders = [f.uri for f in (getattr(params, "workspace_folders", None) or [])]
    if not folders and getattr(params, "root_uri", None):
        folders = [params.root_uri]
    paths = [local_path(uri) for uri in folders]
    if not folders and isinstance(getattr(params, "root_path", None), str):
        paths = [params.root_path if params.root_path.startswith("/") else None]
    state.folders = tuple(dict.fromkeys(p for p in paths if p))[:MAX_FOLDERS]
    experimental = params.capabilities.experimental
    if isinstance(experimental, dict) and experimental.get("codespecWorkspaceTrusted") is False:
        state.workspace_trusted = False


def change_folders(ls: CodespecServer, params: Any) -> None:
    """``workspace/didChangeWorkspaceFolders``: removed folders leave the session, added ones
    join it (at most ``MAX_FOLDERS`` in all, ``file:`` URIs of this machine only). Indexes in
    use are swapped for the new set's, the new acquired before the old are released, so a
    folder kept keeps its index."""
    state = ls.session
    event = getattr(params, "event", None)
    removed = {local_path(f.uri) for f in (getattr(event, "removed", None) or [])}
    added = [local_path(f.uri) for f in (getattr(event, "added", None) or [])]
    kept = [folder for folder in state.folders if folder not in removed]
    folders = tuple(dict.fromkeys(p for p in kept + added if p))[:MAX_FOLDERS]
    if folders == state.folders:
        return
    log.info("session %s: workspace folders now %d", state.id, len(folders))
    old, state.folders, state.indexes = state.indexes, folders, None
    if old is not None:
        indexes(ls)  # (acquired again now: those kept are still held by ``old``)
        release_indexes(ls, old)


def uses_workspace(ls: CodespecServer) -> bool:
    """Whether the session may use workspace context: the setting is on and the client has not
    said its folders are untrusted."""
    return ls.session.settings.workspace_context and ls.session.workspace_trusted


def indexes(ls: CodespecServer) -> list[WorkspaceIndex]:
    """The session's indexes, acquired on first use; [] while workspace context is off."""
    state = ls.session
    if not uses_workspace(ls):
        return []
    if ls.daemon.workspaces is None or not state.folders:
        return []
    if state.indexes is None:
        acquired = (ls.daemon.workspaces.acquire(folder) for folder in state.folders)
        state.indexes = [index for index in acquired if index is not None]
    return state.indexes


def release(ls: CodespecServer) -> None:
    """The session ended: its indexes go when no other session uses them."""
    release_indexes(ls, ls.session.indexes or [])
    ls.session.indexes = None


def release_indexes(ls: CodespecServer, held: list[WorkspaceIndex]) -> None:
    if ls.daemon.workspaces is not None:
        for index in held:
            ls.daemon.workspaces.release(index)


def place_in(ls: CodespecServer, uri: str) -> tuple[WorkspaceIndex, str] | None:
    """The index a document belongs to and its path relative to that index's root."""
    path = local_path(uri)
    if path is None:
        return None
    for index in indexes(ls):
        relative = index.relative(path)
        if relative is not None:
            return index, relative
    return None


def context_files(
    ls: CodespecServer,
    record: OpenDocument,
    prefix: str,
    suffix: str,
    options: CompletionOptions,
) -> tuple[str | None, tuple[tuple[str, str], ...]]:
    """For a request in ``doc``: its path as the prompt shows it (relative to its workspace
    folder; None outside one) and the workspace definitions worth its prefill, as many as its
    prompt has room for (``completion.definition_chars``)."""
    doc = record.document
    found = place_in(ls, doc.uri)
    if found is None:
        return None, ()
    index, relative = found
    budget = definition_chars(options, ls.daemon.prefill_rate())
    language = language_of(relative) or doc.language_id
    chunks = choose_chunks(index, relative, language, prefix, suffix, budget, record.context_memory)
    return relative, as_files(chunks)


def drafting_corpora(ls: CodespecServer, doc: Document) -> tuple[TokenCorpus, ...]:
    """What the engine may draft from for a request in ``doc``, besides its prompt: the token
    ids of its workspace folder's files, and the completions the user accepted. None when
    the session may not use workspace context (``uses_workspace``)."""
    if not uses_workspace(ls):
        return ()
    corpora = []
    found = place_in(ls, doc.uri)
    if found is not None and found[0].corpus.total:
        corpora.append(found[0].corpus)
    accepted = ls.daemon.accepted.corpus() if ls.daemon.accepted is not None else None
    if accepted is not None and accepted.total:
        corpora.append(accepted)
    return tuple(corpora)


def learn_accepted(ls: CodespecServer, suggestion: Suggestion) -> None:
    """A suggestion was taken, in full or in part: the drafter keeps what was taken (off the
    event loop: it tokenizes and appends to a file)."""
    if ls.daemon.accepted is None or not uses_workspace(ls):
        return
    taken = suggestion.text[: suggestion.accepted_chars]
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return
    loop.run_in_executor(None, _learn, ls.daemon.accepted, suggestion.head, taken)


def _learn(accepted: AcceptedCompletions, before: str, taken: str) -> None:
    try:
        accepted.learn(before, taken)
    except Exception:  # learning must not break the session
        log.exception("keeping an accepted completion failed")


def document_opened(ls: CodespecServer, doc: Document) -> None:
    """Index an opened (or closed) document from the editor's text, off the event loop."""
    found = place_in(ls, doc.uri)
    if found is None or doc.too_large:
        return
    index, relative = found
    language = language_of(relative)
    if language is None:
        return
    text = doc.text
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return
    loop.run_in_executor(None, _put, index, relative, language, text)


def _put(index: WorkspaceIndex, relative: str, language: str, text: str) -> None:
    try:
        index.put(relative, language, text)
        index.corpus_changed()
    except Exception:  # a document that breaks the indexer must not break the session
        log.exception("indexing an open document failed")
