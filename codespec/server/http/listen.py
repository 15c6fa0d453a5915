"""Where the HTTP front listens, and uvicorn running it inside the daemon's event loop (the
daemon owns the signals and the loop; uvicorn only serves the socket it is given)."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import uvicorn
from starlette.applications import Starlette

from .app import Admission, build_app
from .front import Front
from .guard import GuardedH11Protocol

if TYPE_CHECKING:
    from ..config import Settings
    from ..view import DaemonView

GRACEFUL_STOP_S = 2


class AddressError(ValueError):
    """``--http`` names no address to listen on; the message is one line."""


@dataclass(frozen=True)
class Address:
    host: str
    port: int

    @property
    def loopback(self) -> bool:
        if self.host == "localhost":
            return True
        return ipaddress.ip_address(self.host).is_loopback

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


def parse_address(text: str) -> Address:
    """``PORT``, ``HOST:PORT`` or ``[V6]:PORT``; the host defaults to 127.0.0.1."""
    host, sep, port = text.rpartition(":")
    host = host.strip("[]") if sep else "127.0.0.1"
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise AddressError(f"--http wants [HOST:]PORT with a port from 1 to 65535, not {text!r}")
    if host != "localhost":
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise AddressError(f"--http wants an IP address (or localhost), not {host!r}") from None
    return Address(host, int(port))


def bind(address: Address) -> socket.socket:
    """The listening socket, bound now: a port in use is an error before the model loads."""
    host = "127.0.0.1" if address.host == "localhost" else address.host
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, address.port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


class _EmbeddedServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # SIGINT and SIGTERM are the daemon's: it stops the front itself


class HttpFront:
    """uvicorn serving ``app`` on ``sock`` as a task of the running loop."""

    def __init__(self, app: Starlette, sock: socket.socket) -> None:
        config = uvicorn.Config(
            app,
            lifespan="off",
            access_log=False,  # a request line names no secret, but nothing is logged per call
            log_level="warning",
            server_header=False,
            http=GuardedH11Protocol,  # (connections bounded there, requests in app.RequestLimit)
            timeout_graceful_shutdown=GRACEFUL_STOP_S,
        )
        self.server = _EmbeddedServer(config)
        self.sock = sock
        self.task: asyncio.Task | None = None

    @property
    def address(self) -> str:
        host, port = self.sock.getsockname()[:2]
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    def start(self) -> None:
        self.task = asyncio.ensure_future(self.server.serve(sockets=[self.sock]))

    async def stop(self) -> None:
        self.server.should_exit = True
        if self.task is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(self.task, GRACEFUL_STOP_S + 3)
        self.sock.close()


def start_http_front(
    daemon: DaemonView, settings: Settings, sock: socket.socket, admission: Admission
) -> HttpFront:
    """The HTTP front (``server/http``) on ``sock``, serving from the daemon's worker."""
    front = Front(daemon, settings)
    http = HttpFront(build_app(front, admission), sock)
    http.start()
    return http
