"""``codespec serve``: the resident daemon. One model, many editor sessions.

It listens on a unix socket (mode 0600, in the user runtime dir) and optionally on TCP, bound to
127.0.0.1 unless the user explicitly allows another address. A TCP connection must first send
``codespec/auth`` with the token from a 0600 file in the user config dir (compared in constant
time), or it is closed before anything is dispatched. The socket is up at once; the model loads
in the background, and requests wait for it.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import os
import secrets
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import platformdirs

from .config import Settings
from .framing import FramingError, read_frame
from .session import create_session, serve_connection, worker_stats
from .worker import Worker

log = logging.getLogger("codespec.daemon")
AUTH = "codespec/auth"


def runtime_dir() -> Path:
    base = os.environ.get("CODESPEC_RUNTIME_DIR") or platformdirs.user_runtime_dir("codespec")
    path = Path(base)
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def default_socket() -> Path:
    return runtime_dir() / "codespec.sock"


def token_file() -> Path:
    return Path(platformdirs.user_config_dir("codespec")) / "daemon.token"


def read_or_create_token(path: Path | None = None) -> str:
    """The TCP token, created once in a 0600 file."""
    path = path or token_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(32))
    os.chmod(path, 0o600)
    return path.read_text().strip()


@dataclass
class ModelSlot:
    """The loaded pair, filled in by a background thread; ``get`` blocks until it is there."""

    pair: object | None = None
    error: Exception | None = None
    ready: threading.Event = field(default_factory=threading.Event)

    def get(self) -> object:
        self.ready.wait()
        if self.error is not None:
            raise RuntimeError(f"the model failed to load: {self.error}")
        return self.pair


class Daemon:
    def __init__(
        self, load_pair, settings: Settings, pass_delay_s: float = 0.0, load_delay_s: float = 0.0
    ) -> None:
        self.slot = ModelSlot()
        self.settings = settings
        self.worker = Worker(self.slot.get, pass_delay_s=pass_delay_s)
        self.sessions: set[int] = set()
        self.started = time.time()
        self._load = load_pair
        self._load_delay_s = load_delay_s  # testing aid: a slow model load

    def load_in_background(self) -> None:
        def load() -> None:
            try:
                time.sleep(self._load_delay_s)
                pair = self._load()
                self.slot.pair = pair
                log.info(
                    "model ready in %.1f s on %s: %s",
                    pair.load_s,
                    pair.device,
                    getattr(pair, "quantization", ""),
                )
            except Exception as exc:  # reported on every request, never a crash
                log.error("model failed to load: %s", exc)
                self.slot.error = exc
            finally:
                self.slot.ready.set()

        threading.Thread(target=load, name="codespec-load", daemon=True).start()

    async def handle(self, reader, writer, token: str | None = None) -> None:
        """One connection: authenticate (TCP), then run an LSP session on it."""
        if token is not None and not await _authenticated(reader, token):
            writer.close()
            return
        ls = create_session(self.worker, self.settings, self.slot.ready)
        session_id = ls.session.id  # type: ignore[attr-defined]
        self.sessions.add(session_id)
        try:
            await serve_connection(reader, writer, ls)
        except asyncio.CancelledError:  # the daemon is stopping
            pass
        finally:
            self.sessions.discard(session_id)
            self.worker.drop_session(session_id)

    def status_line(self) -> str:
        stats = worker_stats(self.worker)
        pair = self.slot.pair
        model = f"{pair.model_label} on {pair.device}" if pair else "loading model..."
        if self.slot.error is not None:
            model = f"model failed: {self.slot.error}"
        tpp = f"{stats['tokens_per_pass']:.2f}" if stats["tokens_per_pass"] else "-"
        p50 = f"{stats['latency_p50_ms']:.0f} ms" if stats["latency_p50_ms"] else "-"
        return (
            f"codespec | {model} | sessions {len(self.sessions)} | served {stats['served']} "
            f"| tokens/pass {tpp} | p50 {p50}"
        )


async def _authenticated(reader: asyncio.StreamReader, token: str) -> bool:
    try:
        body = await asyncio.wait_for(read_frame(reader), timeout=10)
        message = json.loads(body) if body else None
    except (TimeoutError, FramingError, ValueError):
        return False
    if not isinstance(message, dict) or message.get("method") != AUTH:
        return False
    offered = str((message.get("params") or {}).get("token", ""))
    return hmac.compare_digest(offered.encode(), token.encode())


async def run_daemon(
    daemon: Daemon,
    socket_path: Path,
    tcp_port: int | None = None,
    tcp_host: str = "127.0.0.1",
    token: str | None = None,
    status: bool = True,
    ready_file: Path | None = None,
) -> None:
    """Serve until SIGINT/SIGTERM."""
    socket_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if socket_path.exists():
        socket_path.unlink()
    old_umask = os.umask(0o177)  # the socket file is created 0600: only this user may connect
    try:
        unix = await asyncio.start_unix_server(daemon.handle, path=str(socket_path))
    finally:
        os.umask(old_umask)
    os.chmod(socket_path, 0o600)
    servers = [unix]
    if tcp_port is not None:
        assert token is not None

        async def on_tcp(reader, writer):
            await daemon.handle(reader, writer, token=token)

        servers.append(await asyncio.start_server(on_tcp, tcp_host, tcp_port))
    daemon.load_in_background()
    print(
        f"codespec: listening on {socket_path}"
        + (f" and {tcp_host}:{tcp_port}" if tcp_port is not None else ""),
        file=sys.stderr,
        flush=True,
    )
    if ready_file is not None:
        ready_file.write_text(str(os.getpid()))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    ticker = asyncio.ensure_future(_status_ticker(daemon)) if status else None
    await stop.wait()
    if ticker:
        ticker.cancel()
    for server in servers:
        server.close()
    daemon.worker.stop()
    if socket_path.exists():
        socket_path.unlink()
    print("\ncodespec: stopped", file=sys.stderr)


async def _status_ticker(daemon: Daemon) -> None:
    """A live status line on a terminal; a line a minute in a log."""
    tty = sys.stderr.isatty()
    last = ""
    while True:
        line = daemon.status_line()
        if tty:
            sys.stderr.write("\r\x1b[2K" + line)
            sys.stderr.flush()
        elif line != last:
            print(line, file=sys.stderr, flush=True)
        last = line
        await asyncio.sleep(1.0 if tty else 60.0)
