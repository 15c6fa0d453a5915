"""What one LSP session keeps: its own copies of the documents its client opened, its settings,
its lifecycle, and what it last answered (for typed-through and verdicts)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from pygls.exceptions import JsonRpcInvalidParams

from ..stats.verdicts import Ledger
from .config import Settings
from .documents import Document
from .lifecycle import Lifecycle

_ids = itertools.count(1)


@dataclass
class SessionState:
    id: int = field(default_factory=lambda: next(_ids))
    lifecycle: Lifecycle = field(default_factory=Lifecycle)
    exited: bool = False
    settings: Settings = field(default_factory=Settings)
    client_pid: int | None = None
    client_name: str = ""  # the editor's clientInfo name, for the stats
    documents: dict[str, Document] = field(default_factory=dict)  # uri -> what the client opened
    anchors: dict = field(default_factory=dict)  # uri -> prompt.Anchor (used by the worker)
    shown: dict = field(default_factory=dict)  # uri -> (prefix, suffix, text, id) last answered
    ledger: Ledger = field(default_factory=lambda: Ledger(lambda _id, _fields: None))
    warm_timers: dict = field(default_factory=dict)  # uri -> asyncio.TimerHandle
    too_large_logged: set = field(default_factory=set)
    # the workspace folders the client declared at initialize (local paths), whether it trusts
    # them, their indexes once acquired (``workspace.index.Workspaces``), and per document the
    # context chunks its last prompt held (``workspace.context.ContextMemory``)
    folders: tuple[str, ...] = ()
    workspace_trusted: bool = True
    indexes: list | None = None
    context_memory: dict = field(default_factory=dict)
    # per document the other documents' snippets its last prompt held (``workspace.snippets``)
    snippet_memory: dict = field(default_factory=dict)


def open_document(state: SessionState, uri: Any) -> Document:
    """The session's copy of a document it opened; anything else is an invalid-params error
    (the daemon never reads what a client names: a FIFO, another user's 0600 file...)."""
    doc = state.documents.get(uri) if isinstance(uri, str) else None
    if doc is None:
        raise JsonRpcInvalidParams("that document is not open in this session")
    return doc
