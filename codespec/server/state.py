"""What one LSP session keeps: one record per document its client opened (``OpenDocument``),
its settings, its lifecycle, and its verdict ledger."""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from pygls.exceptions import JsonRpcInvalidParams

from ..stats.verdicts import Ledger
from ..workspace.context import ContextMemory
from ..workspace.snippets import SnippetMemory
from .config import Settings
from .documents import Document
from .lifecycle import Lifecycle
from .places import AnchorSlot

_ids = itertools.count(1)


class Shown(NamedTuple):
    """The completion last answered at a document, for typed-through answers."""

    prefix: str
    suffix: str
    text: str
    suggestion_id: str


@dataclass(eq=False)
class OpenDocument:
    """Everything a session keeps of one document it opened: the text (``Document``), the
    prompt anchor the worker extends (``anchor``), the completion last shown, the warm-up
    timer, the workspace chunks and neighbour snippets its last prompt held, and whether its
    size was logged. Closing it is one removal and ``close``."""

    document: Document
    anchor: AnchorSlot = field(default_factory=AnchorSlot)
    shown: Shown | None = None
    warm_timer: asyncio.TimerHandle | None = None
    context_memory: ContextMemory = field(default_factory=ContextMemory)
    snippet_memory: SnippetMemory = field(default_factory=SnippetMemory)
    too_large_logged: bool = False
    closed: bool = False

    @property
    def uri(self) -> str:
        return self.document.uri

    def edits_now(self) -> int:
        """The document's edit count; closed (or opened again as another): as good as edited
        since, so that work asked before is stale."""
        return self.document.edits + self.closed

    def cancel_warm_up(self) -> None:
        if self.warm_timer is not None:
            self.warm_timer.cancel()
            self.warm_timer = None

    def close(self) -> None:
        self.closed = True
        self.cancel_warm_up()


@dataclass
class SessionState:
    id: int = field(default_factory=lambda: next(_ids))
    lifecycle: Lifecycle = field(default_factory=Lifecycle)
    exited: bool = False
    settings: Settings = field(default_factory=Settings)
    client_pid: int | None = None
    client_name: str = ""  # the editor's clientInfo name, for the stats
    documents: dict[str, OpenDocument] = field(default_factory=dict)  # uri -> what it opened
    ledger: Ledger = field(default_factory=lambda: Ledger(lambda _id, _fields: None))
    # the workspace folders the client declared at initialize (local paths), whether it trusts
    # them, and their indexes once acquired (``workspace.index.Workspaces``)
    folders: tuple[str, ...] = ()
    workspace_trusted: bool = True
    indexes: list | None = None

    def opened(self, document: Document) -> OpenDocument:
        """A document the client opened (again: the earlier record is closed)."""
        if (earlier := self.documents.get(document.uri)) is not None:
            earlier.close()
        record = self.documents[document.uri] = OpenDocument(document)
        return record

    def closed(self, uri: str) -> OpenDocument | None:
        """The client closed ``uri``: its record, closed and forgotten (None: not open)."""
        record = self.documents.pop(uri, None)
        if record is not None:
            record.close()
        return record

    def end(self) -> None:
        """The session ended: no warm-up for any of its documents."""
        for record in self.documents.values():
            record.cancel_warm_up()


def open_document(state: SessionState, uri: Any) -> OpenDocument:
    """The session's record of a document it opened; anything else is an invalid-params error
    (the daemon never reads what a client names: a FIFO, another user's 0600 file...)."""
    record = state.documents.get(uri) if isinstance(uri, str) else None
    if record is None:
        raise JsonRpcInvalidParams("that document is not open in this session")
    return record
