"""``codespec lsp``: what editors start. LSP over stdio, relayed byte for byte to the daemon.

If no daemon is listening, one is started in the background (its output goes to a log file in
the user state dir) and the relay waits for its socket; the daemon loads the model while the
editor initializes. The relay copies bytes in both directions on two threads and adds nothing
else to the stream (over TCP it first sends the ``codespec/auth`` message with the token).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import platformdirs

from .daemon import AUTH, read_or_create_token
from .framing import frame


def connect(socket_path: Path | None, tcp: tuple[str, int] | None) -> socket.socket:
    if tcp is not None:
        sock = socket.create_connection(tcp, timeout=5)
        sock.settimeout(None)
        sock.sendall(
            frame({"jsonrpc": "2.0", "method": AUTH, "params": {"token": read_or_create_token()}})
        )
        return sock
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(str(socket_path))
    return sock


def start_daemon(socket_path: Path, extra_args: list[str]) -> None:
    """Start ``codespec serve`` detached from this process, logging to the state dir."""
    log_dir = Path(platformdirs.user_state_dir("codespec"))
    log_dir.mkdir(parents=True, exist_ok=True)
    with open(log_dir / "daemon.log", "ab") as log:
        subprocess.Popen(
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
    try:
        return connect(socket_path, None)
    except (FileNotFoundError, ConnectionRefusedError):
        start_daemon(socket_path, daemon_args)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            return connect(socket_path, None)
        except (FileNotFoundError, ConnectionRefusedError):
            time.sleep(0.05)
    raise TimeoutError(f"the codespec daemon did not come up on {socket_path} in {wait_s:.0f} s")


def pump(source, sink, on_end) -> None:
    try:
        while chunk := source(65536):
            sink(chunk)
    except OSError:
        pass
    finally:
        on_end()


def relay(sock: socket.socket) -> int:
    """Copy stdin -> daemon and daemon -> stdout until either side closes."""
    stdin = sys.stdin.buffer
    stdout = sys.stdout.buffer
    done = threading.Event()

    def write_out(data: bytes) -> None:
        stdout.write(data)
        stdout.flush()

    def end_upstream() -> None:
        try:
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    upstream = threading.Thread(
        target=pump,
        args=(lambda n: os.read(stdin.fileno(), n), sock.sendall, end_upstream),
        daemon=True,
    )
    upstream.start()
    pump(sock.recv, write_out, done.set)
    return 0
