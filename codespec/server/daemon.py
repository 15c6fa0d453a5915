"""``codespec serve``: the resident daemon. One model, many editor sessions.

It listens on a unix socket (mode 0600, in the user runtime dir) and optionally on TCP, bound to
127.0.0.1 unless the user explicitly allows another address; a TCP connection must present the
token first (``tcp_auth.py``). The socket is up at once; the model loads in the background, and
requests wait for it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from ..files import write_private
from ..memory import freeze_resident_objects
from ..stats import report
from ..stats.store import Store
from ..tokenizer import plain_ids
from ..workspace.accepted import FILE_NAME as ACCEPTED_FILE
from ..workspace.accepted import AcceptedCompletions
from ..workspace.index import Workspaces
from . import folders
from .config import Settings
from .counters import worker_stats
from .endpoint import check_socket_path, claim_socket
from .handlers import STATUS
from .session import create_session, serve_connection
from .session_server import CodespecServer
from .tcp_auth import TokenDoor
from .view import DaemonView
from .worker import ModelUnavailable, Worker

if TYPE_CHECKING:
    from ..runtime import LoadedPair  # (the model's stack loads with the model, not before)
    from .http.app import Admission
    from .http.listen import HttpFront

log = logging.getLogger("codespec.daemon")


@dataclass
class ModelSlot:
    """The loaded pair, filled in by a background thread; ``get`` blocks until it is there."""

    pair: LoadedPair | None = None
    error: Exception | None = None
    ready: threading.Event = field(default_factory=threading.Event)

    def get(self) -> LoadedPair:
        self.ready.wait()
        if self.error is not None or self.pair is None:
            raise ModelUnavailable(f"the model failed to load: {self.error}")
        return self.pair


class Daemon:
    def __init__(
        self,
        load_pair: Callable[[], LoadedPair],
        settings: Settings,
        load_delay_s: float = 0.0,
        store: Store | None = None,
        remote: bool = False,
    ) -> None:
        self.slot = ModelSlot()
        self.remote = remote  # the engine decodes on a remote server (known before it loads)
        self.settings = settings
        self.store = store  # acceptance stats (None: not recorded)
        record = store.put_request if store is not None else None
        self.worker = Worker(self.slot.get, record=record)
        self.sessions: dict[int, CodespecServer] = {}  # the live ones, by session id
        # workspace indexes shared by the sessions; they pause while a request runs
        self.workspaces = Workspaces(
            busy=self.worker.serving_request, tokenizer=functools.partial(self.drafting, True)
        )
        # the completions users accepted, to draft from; kept beside the stats when they are
        self.accepted = AcceptedCompletions(
            store.path.parent / ACCEPTED_FILE if store is not None else None,
            tokenizer=functools.partial(self.drafting, False),
        )
        self.started = time.time()
        self._load = load_pair
        self._load_delay_s = load_delay_s  # testing aid: a slow model load
        # what its sessions and HTTP front may ask of it, the engine's status among it (a
        # remote engine's reachability, and once loaded the model's label)
        self.view = DaemonView(
            worker=self.worker,
            model_ready=self.slot.ready,
            store=store,
            workspaces=self.workspaces,
            accepted=self.accepted,
            loaded=self.loaded_pair,
            prefill_rate=self.prefill_rate,
            engine_is_remote=self.engine_is_remote,
            list_models=self.list_models,
            choose_model=self.choose_model,
        )
        # switching models (``switching.py``): how this daemon was started (its arguments
        # after ``codespec``; None: it cannot run itself again), the folders of ``[model]``,
        # and the flags of the model chosen, once one is (the daemon then runs itself again)
        self.argv: list[str] | None = None
        self.model_folders: tuple[str, ...] = ()
        self.switch_to: list[str] | None = None
        self.stopping: asyncio.Event | None = None  # set to stop serving (``run_daemon``)

    def load_in_background(self) -> None:
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:  # (a test's daemon without its sessions' loop)
            loop = None

        def load() -> None:
            try:
                time.sleep(self._load_delay_s)
                pair = self._load()
                health = pair.engine.health
                if health is not None and loop is not None:  # a remote engine's reachability
                    sessions_loop = loop

                    def tell(state: str, message: str) -> None:
                        sessions_loop.call_soon_threadsafe(self.tell_status, state, message)

                    health.listeners.append(tell)
                freeze_resident_objects()  # no full collection walks the model again
                self.slot.pair = pair
                if loop is not None:
                    next_edit = pair.next_edit.model_label if pair.next_edit else None
                    loop.call_soon_threadsafe(self.model_loaded, pair.model_label, next_edit)
                log.info(
                    "model ready in %.1f s on %s: %s",
                    pair.load_s,
                    pair.device,
                    pair.quantization,
                )
            except Exception as exc:  # reported on every request, never a crash
                log.error("model failed to load: %s", exc)
                self.slot.error = exc
            finally:
                self.slot.ready.set()

        threading.Thread(target=load, name="codespec-load", daemon=True).start()

    def drafting(self, wait: bool) -> Callable[[str], list[int]] | None:
        """How the workspace drafter tokenizes, once the model is loaded (``wait``: wait for
        it); None while it loads, when it failed, and for an engine that does not draft here
        (a remote one)."""
        if wait:
            self.slot.ready.wait()
        pair = self.slot.pair if self.slot.ready.is_set() else None
        if pair is None or not pair.engine.uses_corpora:
            return None
        tokenizer = pair.tokenizer
        return lambda text: plain_ids(tokenizer, text)

    def loaded_pair(self) -> LoadedPair | None:
        """The model pair once it has loaded (None while it loads, or if it failed)."""
        return self.slot.pair if self.slot.ready.is_set() else None

    def prefill_rate(self) -> float | None:
        """The loaded engine's prefill rate (prompt windows are sized by it); None until then."""
        pair = self.slot.pair
        return pair.engine.prefill_rate if pair is not None else None

    def engine_is_remote(self) -> bool:
        """Whether prompts go to a remote server (known from the start: prompts built while
        the engine loads are sent there too)."""
        return self.remote

    def model_loaded(self, label: str, next_edit_label: str | None = None) -> None:
        """Every session hears which model runs (``codespec/status``'s ``model``)."""
        status = self.view.status
        status.model = label
        if next_edit_label is not None:  # (a next-edit model of the user's: lsp/PROTOCOL.md)
            status.next_edit_model = next_edit_label
        self.tell_status(status.state, status.message)

    def tell_status(self, state: str, message: str) -> None:
        """Every session hears ``codespec/status`` when the engine's state changes."""
        status = self.view.status
        status.state, status.message = state, message
        for ls in list(self.sessions.values()):
            try:
                ls.protocol.notify(STATUS, status.params())
            except Exception as exc:  # a closing session
                log.debug("status not sent: %s", exc)

    async def handle(self, reader, writer, door: TokenDoor | None = None) -> None:
        """One connection: through the ``door`` (TCP), then an LSP session on it."""
        if door is not None and not await door.admit(reader, writer):
            return
        ls = create_session(self.view, self.settings)
        session_id = ls.session.id
        self.sessions[session_id] = ls
        try:
            await serve_connection(reader, writer, ls)
        except asyncio.CancelledError:  # the daemon is stopping
            pass
        finally:
            self.sessions.pop(session_id, None)
            self.worker.drop_session(session_id)
            folders.release(ls)

    async def list_models(self) -> list[dict]:
        """``codespec/models``: the rows ``codespec models`` prints, the one running marked."""
        from ..models.listing import model_rows
        from .switching import running_name

        rows = await asyncio.to_thread(model_rows, self.model_folders)
        running = running_name(self.argv or [])
        label = self.view.status.model
        for row in rows:
            named = running is not None and row["name"] == running
            row["running"] = named or (running is None and row.get("label") == label)
        return rows

    async def choose_model(self, name: str) -> dict:
        """``codespec/chooseModel``: check that ``name`` can run here, then stop serving and run
        this daemon again with it (``switching.py``). Raises ``ValueError`` (one line) when it
        cannot."""
        from .switching import checked_row, model_flags

        if self.argv is None or self.stopping is None:
            raise ValueError("this daemon cannot switch models (it was not started by serve)")
        if self.remote:
            raise ValueError("this daemon decodes on a remote engine: its server's model runs")
        row = await asyncio.to_thread(checked_row, name, self.model_folders)  # (reads files)
        self.switch_to = model_flags(row)
        log.info("switching to the model %s", name)
        self.tell_status("switching", f"switching to {name}")
        # (the reply goes out first: the restart closes every connection)
        asyncio.get_running_loop().call_later(0.2, self.stopping.set)
        return {"model": name, "restarting": True}

    def status_line(self) -> str:
        stats = worker_stats(self.worker.stats)
        pair = self.slot.pair
        model = f"{pair.model_label} on {pair.device}" if pair else "loading model..."
        if self.slot.error is not None:
            model = f"model failed: {self.slot.error}"
        tpp = f"{stats['tokens_per_pass']:.2f}" if stats["tokens_per_pass"] else "-"
        p50 = f"{stats['latency_p50_ms']:.0f} ms" if stats["latency_p50_ms"] else "-"
        return (
            f"codespec | {model} | sessions {len(self.sessions)} | served {stats['served']} "
            f"| tokens/pass {tpp} | p50 {p50}{self.acceptance_text()}"
        )

    def acceptance_text(self) -> str:
        """Suggestions shown and accepted since this daemon started (from the store)."""
        if self.store is None:
            return ""
        try:
            shown, accepted = self.store.read(
                lambda conn: report.shown_and_accepted(conn, self.started)
            )
        except Exception:  # the status line never fails
            return ""
        rate = f" ({100 * accepted / shown:.0f}%)" if shown else ""
        return f" | accepted {accepted}/{shown} shown{rate}"


async def _listen(
    daemon: Daemon,
    socket_path: Path,
    tcp_port: int | None,
    tcp_host: str,
    token: str | None,
    inherited: socket.socket | None = None,
) -> list[asyncio.Server]:
    if inherited is not None:  # this daemon's own socket, kept across a model switch
        unix = await asyncio.start_unix_server(daemon.handle, sock=inherited)
    else:
        if socket_path.exists():  # left by a daemon that died: nobody holds the lock
            socket_path.unlink()
        old_umask = os.umask(0o177)  # the socket file is made 0600: only this user may connect
        try:
            unix = await asyncio.start_unix_server(daemon.handle, path=str(socket_path))
        finally:
            os.umask(old_umask)
        os.chmod(socket_path, 0o600)
    servers = [unix]
    if tcp_port is not None:
        assert token is not None

        door = TokenDoor(token)

        async def on_tcp(reader, writer):
            await daemon.handle(reader, writer, door)

        try:
            servers.append(await asyncio.start_server(on_tcp, tcp_host, tcp_port))
        except OSError:
            unix.close()
            raise
    return servers


async def run_daemon(
    daemon: Daemon,
    socket_path: Path,
    tcp_port: int | None = None,
    tcp_host: str = "127.0.0.1",
    token: str | None = None,
    status: bool = True,
    ready_file: Path | None = None,
    lock: int | None = None,
    http: tuple[socket.socket, Admission] | None = None,
    inherited: socket.socket | None = None,
) -> None:
    """Serve until SIGINT/SIGTERM. Raises ``DaemonRunning`` when another daemon owns the
    socket: exactly one may, or stopping one would unlink the socket of the other. ``lock``:
    the socket's lock when the caller claimed it already (``endpoint.claim_socket``).
    ``http``: (a bound socket, its ``http.app.Admission``) for the HTTP front. ``inherited``:
    the listening socket a model switch handed over (``switching.py``), ``lock`` with it."""
    if lock is None:
        socket_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        check_socket_path(socket_path)
        lock = claim_socket(socket_path)
    try:
        servers = await _listen(daemon, socket_path, tcp_port, tcp_host, token, inherited)
    except BaseException:  # a port in use, say: leave nothing behind
        socket_path.unlink(missing_ok=True)
        socket_path.with_name(socket_path.name + ".lock").unlink(missing_ok=True)
        os.close(lock)
        raise
    front = None
    if http is not None:
        from .http.listen import start_http_front

        front = start_http_front(daemon.view, daemon.settings, *http)
    daemon.load_in_background()
    print(
        f"codespec: listening on {socket_path}"
        + (f" and {tcp_host}:{tcp_port}" if tcp_port is not None else "")
        + (f" and {front.address} (llama-server and OpenAI endpoints)" if front else ""),
        file=sys.stderr,
        flush=True,
    )
    if ready_file is not None:
        write_private(ready_file, str(os.getpid()))
    stop = daemon.stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    ticker = asyncio.ensure_future(_status_ticker(daemon)) if status else None
    await stop.wait()
    if ticker:
        ticker.cancel()
    if daemon.switch_to is not None and daemon.argv is not None:
        await _run_again_with(daemon, daemon.argv, daemon.switch_to, servers, front, lock)
    for server in servers:
        server.close()
    if front is not None:
        await front.stop()
    daemon.worker.stop()
    for ls in list(daemon.sessions.values()):
        ls.session.ledger.end()  # suggestions still showing were left: recorded before closing
    if daemon.store is not None:
        daemon.store.close()  # commit what is queued, checkpoint, close the file
    if socket_path.exists():
        socket_path.unlink()
    os.close(lock)
    print("\ncodespec: stopped", file=sys.stderr)


async def _run_again_with(
    daemon: Daemon,
    argv: list[str],
    flags: list[str],
    servers: list[asyncio.Server],
    front: HttpFront | None,
    lock: int,
) -> NoReturn:
    """A model switch: answer what is asked (empty), keep what was recorded, then become the
    daemon of the other model on the same listening socket (``switching.py``)."""
    from .switching import restart_argv, run_again

    for server in servers[1:]:  # TCP: the new program listens there again
        server.close()
    if front is not None:
        await front.stop()
    daemon.worker.cancel_everything()
    await asyncio.sleep(0.3)  # the empty answers reach their sessions before they close
    for ls in list(daemon.sessions.values()):
        ls.session.ledger.end()
    if daemon.store is not None:
        daemon.store.close()
    listening = servers[0].sockets[0].fileno()
    print(f"codespec: switching to {' '.join(flags[1:])}", file=sys.stderr, flush=True)
    run_again(restart_argv(argv, flags, (listening, lock)), listening, lock)


async def _status_ticker(daemon: Daemon) -> None:
    """A live status line on a terminal; a line a minute in a log."""
    tty = sys.stderr.isatty()
    last = ""
    while True:
        line = await asyncio.to_thread(daemon.status_line)  # it reads the store: not on the loop
        if tty:
            sys.stderr.write("\r\x1b[2K" + line)
            sys.stderr.flush()
        elif line != last:
            print(line, file=sys.stderr, flush=True)
        last = line
        await asyncio.sleep(1.0 if tty else 60.0)
