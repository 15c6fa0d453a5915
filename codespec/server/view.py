"""What a session or the HTTP front may ask of the daemon, declared once (``DaemonView``) and
handed to each at construction: the engine worker, the stats store, the workspace indexes, the
accepted completions, whether and which model is loaded, the engine's status, the prefill rate,
the models and the switch to another, and the rule for other files' text in a prompt.

Nothing else of the daemon is reachable from a session, and nothing is assigned onto a session
after it is made.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..stats.store import Store
from ..workspace.accepted import AcceptedCompletions
from ..workspace.index import Workspaces
from ..workspace.redaction import redact
from .worker import Worker

if TYPE_CHECKING:
    from ..runtime import LoadedPair  # (the model's stack loads with the model, not before)

Files = tuple[tuple[str, str], ...]  # (name, text) of other files a prompt shows


@dataclass
class EngineStatus:
    """The engine's state as every editor's status shows it (``codespec/status``)."""

    state: str = "ready"  # ready, down (a remote engine), switching
    message: str = ""
    model: str | None = None  # the model that runs, once loaded
    next_edit_model: str | None = None  # the user's own next-edit model, where there is one

    def params(self) -> dict:
        """``codespec/status``'s params (lsp/PROTOCOL.md): the models only once known."""
        params: dict = {"state": self.state, "message": self.message}
        if self.model is not None:
            params["model"] = self.model
        if self.next_edit_model is not None:
            params["next_edit_model"] = self.next_edit_model
        return params

    def worth_telling(self) -> bool:
        """Whether a session that just started should hear it (not a plain "ready")."""
        return self.state != "ready" or self.model is not None


async def no_models() -> list[dict]:
    return []


async def no_switch(name: str) -> dict:
    raise ValueError("this server cannot switch models")


def nothing_loaded() -> LoadedPair | None:
    return None


@dataclass(frozen=True)
class DaemonView:
    """The daemon as its sessions and its HTTP front see it."""

    worker: Worker
    model_ready: threading.Event  # set once the model is loaded (or failed to)
    status: EngineStatus = field(default_factory=EngineStatus)
    store: Store | None = None  # acceptance stats (None: not recorded)
    workspaces: Workspaces | None = None  # the workspace indexes (None: no workspace context)
    accepted: AcceptedCompletions | None = None  # accepted completions to draft from
    loaded: Callable[[], LoadedPair | None] = nothing_loaded  # the pair once loaded
    # the loaded model's prefill rate (tokens/s; None while it loads): prompt windows by time
    prefill_rate: Callable[[], float | None] = lambda: None
    engine_is_remote: Callable[[], bool] = lambda: False  # prompts go to a remote server
    list_models: Callable[[], Awaitable[list[dict]]] = no_models  # ``switching.py``
    choose_model: Callable[[str], Awaitable[dict]] = no_switch

    def outbound(self, files: Files, workspace_allowed: bool = True) -> Files:
        """Other files' text as a prompt may hold it (lsp/PROTOCOL.md, docs/remote.md): as it
        is for the local engine; for a remote one, with secrets redacted, and none at all where
        it comes from the workspace and the user keeps that on the machine
        (``workspace_allowed``: the ``remoteWorkspaceContext`` setting)."""
        if not files or not self.engine_is_remote():
            return files
        if not workspace_allowed:
            return ()
        return tuple((name, redact(text)) for name, text in files)
