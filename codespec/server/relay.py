"""``codespec lsp``: what editors start. LSP over stdio, relayed to the daemon.

If no daemon is listening, one is started in the background (its output goes to a log file in
the user state dir) and the relay waits for its socket; the daemon loads the model while the
editor initializes. Messages pass through unchanged, frame by frame. The relay keeps a mirror of
the session (the ``initialize`` params, settings, the text of open documents, requests waiting
for a reply) so that if the daemon dies, the next message restarts it and the session goes on:
waiting requests are answered with an error, the new daemon is initialized and gets the
documents, and the editor never notices more than that.

The relay never sits there deaf, and never loops: a daemon that keeps closing the connection
is restarted at most ``RESTART_BUDGET`` times a minute, with growing pauses, and past that the
relay says why on stderr and exits non-zero (the editor shows a server that exited); a daemon
that refuses the token (TCP) ends it at once, with that reason; a request the daemon leaves
unanswered for ``REPLY_DEADLINE_S`` (a stopped process) is answered with an error; input that
cannot be read as JSON at all (too deep, say) is passed on for the daemon to answer.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import BinaryIO

import platformdirs
from lsprotocol import types

from ..files import open_log, parse_json
from .documents import Document
from .endpoint import (
    AUTH,
    AUTH_REFUSED,
    check_socket_owner,
    check_socket_path,
    read_or_create_token,
)
from .framing import FramingError, error_reply, frame, read_frame_sync

REPLAY_ID = "codespec-relay-initialize"
RESTART_BUDGET = 5  # daemon restarts within RESTART_WINDOW_S before the relay gives up
RESTART_WINDOW_S = 60.0
RESTART_PAUSE_S = (0.0, 0.5, 1.0, 2.0, 4.0)  # before the 1st, 2nd, ... restart in the window
# A request unanswered this long gets an error from the relay: longer than a first start's model
# load (requests made meanwhile are served once it is ready), so only a stuck daemon reaches it.
REPLY_DEADLINE_S = 300.0


def _read_or_none(stream: BinaryIO) -> bytes | None:
    """A frame from the daemon; a reset connection or broken framing counts as its end."""
    try:
        return read_frame_sync(stream)
    except (OSError, FramingError):
        return None


def parse(body: bytes) -> dict:
    """A frame's JSON object, or ``{}`` for anything else: too deep for the parser, not JSON,
    not an object. The relay only reads messages to mirror them; judging them is the daemon's
    job, and nothing a client or daemon sends may stop the relay."""
    try:
        message = parse_json(body)
    except ValueError:
        return {}
    return message if isinstance(message, dict) else {}


def connect(socket_path: Path | None, tcp: tuple[str, int] | None) -> socket.socket:
    if tcp is not None:
        sock = socket.create_connection(tcp, timeout=5)
        sock.settimeout(None)
        sock.sendall(
            frame({"jsonrpc": "2.0", "method": AUTH, "params": {"token": read_or_create_token()}})
        )
        return sock
    if socket_path is None:
        raise ValueError("connect needs a socket path or a TCP address")
    check_socket_owner(socket_path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(str(socket_path))
    except OSError:
        sock.close()
        raise
    return sock


def daemon_log() -> Path:
    return Path(platformdirs.user_state_dir("codespec")) / "daemon.log"


def start_daemon(socket_path: Path, extra_args: list[str]) -> subprocess.Popen:
    """Start ``codespec serve`` detached from this process, logging to the state dir."""
    log_path = daemon_log()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with os.fdopen(open_log(log_path), "ab") as log:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "codespec",
                "serve",
                "--socket",
                str(socket_path),
                "--no-status",
                *extra_args,
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )


def connect_or_start(socket_path: Path, daemon_args: list[str], wait_s: float = 60.0):
    """Connect to the daemon, starting one if none listens. A daemon that cannot start (its
    socket path is unusable, say: exit status 2) ends the wait at once."""
    try:
        return connect(socket_path, None)
    except (FileNotFoundError, ConnectionRefusedError):
        check_socket_path(socket_path)  # a directory there would fail the daemon: say so now
        started = start_daemon(socket_path, daemon_args)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            return connect(socket_path, None)
        except (FileNotFoundError, ConnectionRefusedError):
            if started.poll() == 2:
                raise OSError(f"the codespec daemon could not start (see {daemon_log()})") from None
            time.sleep(0.05)
    raise TimeoutError(f"the codespec daemon did not come up on {socket_path} in {wait_s:.0f} s")


class SessionMirror:
    """Just enough of the session to hand it to a new daemon."""

    def __init__(self) -> None:
        self.initialize: dict | None = None
        self.initialized = False
        self.settings: list[dict] = []
        self.docs: dict[str, Document] = {}
        # request id -> (method, when sent), client -> daemon, not yet answered
        self.pending: dict = {}
        self.answered_here: set = set()  # ids the relay answered itself (past the deadline)
        self.encoding = "utf-16"
        self.exited = False

    def from_client(self, message: dict) -> None:
        method, params = message.get("method"), message.get("params") or {}
        if "id" in message and method and _hashable(message["id"]):
            self.pending[message["id"]] = (method, time.monotonic())
        if method == "initialize":
            self.initialize = message
        elif method == "initialized":
            self.initialized = True
        elif method == "exit":
            self.exited = True
        elif method == "workspace/didChangeConfiguration":
            self.settings.append(message)
        elif method == "textDocument/didOpen":
            d = params["textDocument"]
            self.docs[d["uri"]] = Document(
                d["uri"], d["text"], d.get("version"), d.get("languageId") or ""
            )
        elif method == "textDocument/didChange":
            doc = self.docs.get(params["textDocument"]["uri"])
            if doc is not None:
                for change in params["contentChanges"]:
                    doc.apply(_change(change), self.encoding)
                doc.version = params["textDocument"].get("version")
        elif method == "textDocument/didClose":
            self.docs.pop(params["textDocument"]["uri"], None)

    def from_daemon(self, message: dict) -> bool:
        """Note a daemon's message; False for a reply the relay already gave itself."""
        if "method" not in message and "id" in message and _hashable(message["id"]):
            if message["id"] in self.answered_here:
                self.answered_here.discard(message["id"])
                return False
            self.pending.pop(message["id"], None)
            encoding = ((message.get("result") or {}).get("capabilities") or {}).get(
                "positionEncoding"
            )
            if encoding:
                self.encoding = encoding
        return True

    def overdue_replies(self, now: float, deadline_s: float) -> list[dict]:
        """Error replies for requests the daemon has left unanswered past the deadline."""
        late = [i for i, (_, sent) in self.pending.items() if now - sent > deadline_s]
        for i in late:
            del self.pending[i]
            self.answered_here.add(i)
        message = f"the codespec daemon did not answer in {deadline_s:g} s"
        return [error_reply(i, -32603, message) for i in late]

    def orphan_replies(self) -> list[dict]:
        """Error replies for the requests the dead daemon never answered."""
        replies = [
            error_reply(i, -32603, "the codespec daemon restarted; please retry")
            for i in list(self.pending)
        ]
        self.pending.clear()
        return replies

    def replay(self) -> list[dict]:
        """What a fresh daemon needs to serve this session."""
        if self.initialize is None:
            return []
        messages: list[dict] = [dict(self.initialize, id=REPLAY_ID)]
        if self.initialized:
            messages.append({"jsonrpc": "2.0", "method": "initialized", "params": {}})
        messages += self.settings
        for doc in self.docs.values():
            messages.append(
                {
                    "jsonrpc": "2.0",
                    "method": "textDocument/didOpen",
                    "params": {
                        "textDocument": {
                            "uri": doc.uri,
                            "languageId": doc.language_id or "",
                            "version": doc.version or 0,
                            "text": doc.text,
                        }
                    },
                }
            )
        return messages


def _hashable(value) -> bool:
    return isinstance(value, str | int | float | bool) or value is None


def _change(change: dict):
    if "range" not in change:
        return types.TextDocumentContentChangeWholeDocument(text=change["text"])
    r = change["range"]
    return types.TextDocumentContentChangePartial(
        range=types.Range(types.Position(**r["start"]), types.Position(**r["end"])),
        text=change["text"],
    )


class Relay:
    """stdin -> daemon and daemon -> stdout, frame by frame, restarting a dead daemon."""

    def __init__(
        self,
        connect_fn,
        stdin: BinaryIO,
        stdout: BinaryIO,
        reply_deadline_s: float = REPLY_DEADLINE_S,
    ) -> None:
        self.reply_deadline_s = reply_deadline_s
        self.connect_fn = connect_fn  # () -> socket, starting a daemon if needed
        self.stdin, self.stdout = stdin, stdout
        self.mirror = SessionMirror()
        self.lock = threading.Condition()
        self.out_lock = threading.Lock()
        self.sock = connect_fn()
        self.stdin_open = True
        self.restarts: list[float] = []  # when each restart of the daemon began

    def write_client(self, payload: bytes) -> None:
        with self.out_lock:
            self.stdout.write(payload)
            self.stdout.flush()

    def send_daemon(self, payload: bytes) -> None:
        while True:
            with self.lock:
                sock = self.sock
            try:
                sock.sendall(payload)
                return
            except OSError:
                with self.lock:  # the daemon is being restarted: wait for the new socket
                    if self.sock is sock:
                        self.lock.wait(timeout=1)

    def upstream(self) -> None:
        while (body := self._from_editor()) is not None:
            try:
                with self.lock:
                    self.mirror.from_client(parse(body))
            except Exception:  # not ours to judge: the daemon answers malformed input
                pass
            self.send_daemon(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.stdin_open = False
        with self.lock:
            try:
                self.sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def _from_editor(self) -> bytes | None:
        """The editor's next frame, with the daemon's strict framing. Bytes that are not LSP
        framing end the relay (exit status 1): the editor restarts a server that exits, while
        one that stays up with its input lost would leave every later request hanging."""
        try:
            return read_frame_sync(self.stdin)
        except FramingError as exc:
            print(f"codespec lsp: bad input from the editor ({exc}); exiting", file=sys.stderr)
            sys.stderr.flush()
            os._exit(1)

    def downstream(self) -> bool:
        """Daemon -> editor until the editor leaves (True) or no daemon can be had (False)."""
        while True:
            stream = self.sock.makefile("rb")
            while (body := _read_or_none(stream)) is not None:
                message = parse(body)
                if message.get("method") == AUTH_REFUSED:
                    return self._give_up("the daemon refused this relay's token (TCP)")
                if message.get("id") == REPLAY_ID and "method" not in message:
                    continue  # the reply to our own replayed initialize
                with self.lock:
                    fresh = self.mirror.from_daemon(message)
                if fresh:
                    self.write_client(b"Content-Length: %d\r\n\r\n" % len(body) + body)
            if not self.stdin_open or self.mirror.exited:
                return True
            if (pause := self._restart_pause()) is None:
                return self._give_up(
                    f"the daemon closed the connection {RESTART_BUDGET + 1} times in "
                    f"{RESTART_WINDOW_S:.0f} s (see its log); giving up"
                )
            time.sleep(pause)
            try:
                self.restart()
            except (OSError, TimeoutError) as exc:
                return self._give_up(f"the daemon is gone and did not restart: {exc}")

    def _restart_pause(self) -> float | None:
        """How long to wait before the next restart, or None when the budget is spent."""
        now = time.monotonic()
        self.restarts = [t for t in self.restarts if now - t < RESTART_WINDOW_S]
        if len(self.restarts) >= RESTART_BUDGET:
            return None
        self.restarts.append(now)
        return RESTART_PAUSE_S[min(len(self.restarts) - 1, len(RESTART_PAUSE_S) - 1)]

    @staticmethod
    def _give_up(why: str) -> bool:
        print(f"codespec lsp: {why}", file=sys.stderr)
        sys.stderr.flush()
        return False

    def watch_deadlines(self) -> None:
        """Answer requests a stopped (not dead) daemon leaves hanging."""
        while True:
            time.sleep(1.0)
            with self.lock:
                replies = self.mirror.overdue_replies(time.monotonic(), self.reply_deadline_s)
            for reply in replies:
                self.write_client(frame(reply))

    def restart(self, attempts: int = 20) -> None:
        """The daemon went away while the editor is still here: start another, hand over.

        A connection made while the dead daemon's listening socket is still being torn down
        is accepted by the kernel and then reset: such an attempt is retried."""
        with self.lock:
            replies = self.mirror.orphan_replies()
        for reply in replies:
            self.write_client(frame(reply))
        new = None
        for attempt in range(attempts):
            new = self.connect_fn()
            try:
                for message in self.mirror.replay():
                    new.sendall(frame(message))
                break
            except OSError:
                new.close()
                if attempt == attempts - 1:
                    raise
                time.sleep(0.25)
        assert new is not None  # (attempts >= 1: the loop connected or raised)
        with self.lock:
            self.sock = new
            self.lock.notify_all()

    def run(self) -> int:
        """Relay until the editor leaves (0) or the daemon cannot be had (1). The process ends
        here at once: the input thread may be inside a blocking read of stdin, and Python's
        shutdown would abort on its lock instead of exiting with the status."""
        threading.Thread(target=self.upstream, daemon=True).start()
        threading.Thread(target=self.watch_deadlines, daemon=True).start()
        status = 0 if self.downstream() else 1
        with self.out_lock:
            for stream in (self.stdout, sys.stderr):
                try:
                    stream.flush()
                except (OSError, ValueError):
                    pass
        os._exit(status)
