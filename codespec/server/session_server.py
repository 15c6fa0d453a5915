"""The typed server one LSP session's handlers are given: pygls's ``LanguageServer`` with the
session's state (``state.py``) and the daemon's view (``view.py``) declared. The protocol class
that reads the wire is ``session.py``'s, handed in: this module imports no handler, so the
handlers can import it."""

from __future__ import annotations

import logging
from typing import Any, Protocol

from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol

from .state import SessionState
from .view import DaemonView

log = logging.getLogger("codespec.session")


class SessionProtocol(Protocol):
    """What handlers use of the session's protocol: the position encoding agreed at
    ``initialize``, the id of the request being handled, notifications to the client, and the
    converter that reads params as lsprotocol's types."""

    @property
    def encoding(self) -> str: ...

    @property
    def msg_id(self) -> Any: ...

    def notify(self, method: str, params: Any = None) -> None: ...

    @property
    def _converter(self) -> Any: ...  # (pygls's cattrs converter: params to lsprotocol types)


class CodespecServer(LanguageServer):
    """One session's pygls server, with what its handlers use declared: the session's state
    and the daemon's view."""

    protocol: SessionProtocol  # pyright: ignore[reportIncompatibleVariableOverride]  (the subclass pygls is given)

    def __init__(
        self,
        state: SessionState,
        daemon: DaemonView,
        protocol_cls: type[LanguageServerProtocol],
    ) -> None:
        self.session = state  # (before pygls builds the protocol, which reads its attributes)
        self.daemon = daemon
        super().__init__("codespec", "0.1.0", protocol_cls=protocol_cls)

    def report_server_error(self, error: Exception, source: Any) -> None:
        """pygls would show the editor a message with Python exception text; log it instead
        (a bad notification is the client's problem, not the user's)."""
        log.debug("session error (%s): %s", getattr(source, "__name__", source), error)
