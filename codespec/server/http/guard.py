"""The HTTP front's connections: what an idle, slow or numerous client may hold.

uvicorn keeps a connection that has not sent a whole request head for as long as its peer
likes, and its ``limit_concurrency`` counts connections: some sixty sockets that send nothing
(any local process can open them) made it answer 503 to everyone. So the front runs uvicorn's
h11 protocol with three rules of its own, and counts requests, not connections
(``app.RequestLimit``):

* a request head must be complete within ``HEAD_TIMEOUT_S`` of the connection's opening or of
  its last answer, or the connection is closed (uvicorn's keep-alive timer stops at the first
  byte, so a head trickled a byte at a time would be held forever);
* one peer address holds at most ``MAX_PER_PEER`` connections, and all peers together
  ``MAX_CONNECTIONS``: a connection past either bound makes room by closing the peer's (or
  anyone's) longest-idle connection that has no request in flight, so idle sockets never lock
  a client with a real request out; only when every one of them is serving a request is the
  newcomer closed;
* nothing else changes: what uvicorn does with a request, it still does.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("codespec.http")
HEAD_TIMEOUT_S = 10.0
MAX_PER_PEER = 128
MAX_CONNECTIONS = 512
_ARRIVALS = itertools.count()


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with the bounds of the module's docstring."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.head_timer: asyncio.TimerHandle | None = None
        self.idle_since = next(_ARRIVALS)  # (an order, not a time: older is smaller)

    @property
    def peer(self) -> str:
        return self.client[0] if self.client else ""

    @property
    def in_request(self) -> bool:
        return self.cycle is not None and not self.cycle.response_complete

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_timer()
        if not self._make_room():
            log.debug("HTTP connection from %s refused: every connection is serving", self.peer)
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_timer()
        super().connection_lost(exc)

    def handle_events(self) -> None:
        waiting = not self.in_request
        super().handle_events()
        if waiting and self.in_request:  # a whole head arrived: its request runs
            self._disarm_head_timer()

    def on_response_complete(self) -> None:
        self.idle_since = next(_ARRIVALS)
        super().on_response_complete()
        if not self.transport.is_closing() and not self.in_request:
            self._arm_head_timer()  # (the next head, if any, within the same bound)

    # -- the rules --------------------------------------------------------------------------------

    def _make_room(self) -> bool:
        """Bound this peer's connections and everyone's; False when no idle one could go."""
        others = [
            c
            for c in self.connections
            if c is not self and isinstance(c, GuardedH11Protocol) and not c.transport.is_closing()
        ]
        mine = [c for c in others if c.peer == self.peer]
        if len(mine) >= MAX_PER_PEER and not _close_longest_idle(mine):
            return False
        if len(others) >= MAX_CONNECTIONS and not _close_longest_idle(others):
            return False
        return True

    def _arm_head_timer(self) -> None:
        self._disarm_head_timer()
        self.head_timer = self.loop.call_later(HEAD_TIMEOUT_S, self._head_overdue)

    def _disarm_head_timer(self) -> None:
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None

    def _head_overdue(self) -> None:
        self.head_timer = None
        if not self.in_request and not self.transport.is_closing():
            self.transport.close()


def _close_longest_idle(connections: list[GuardedH11Protocol]) -> bool:
    idle = [c for c in connections if not c.in_request and not c.transport.is_closing()]
    if not idle:
        return False
    min(idle, key=lambda c: c.idle_since).transport.close()
    return True
