"""A small client for the running daemon, for commands that ask it something (``codespec
stats``): it speaks the daemon's own framing over its unix socket and gives up quickly."""

from __future__ import annotations

import socket
from pathlib import Path

from .files import parse_json
from .server.endpoint import EndpointError, check_socket_owner, default_socket
from .server.framing import FramingError, frame, read_frame_sync


def ask_stats(
    socket_path: str | None, since: str, language: str | None, by: str, timeout: float = 3.0
) -> dict | None:
    """The running daemon's ``codespec/stats`` reply, or None (none runs, or it did not answer
    in time)."""
    try:
        path = Path(socket_path) if socket_path else default_socket()
        check_socket_owner(path)
    except EndpointError:
        return None  # no daemon of this user's to ask: the store is read directly
    if not path.exists():
        return None
    params = {"since": since, "language": language, "by": by}
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(str(path))
            for message in (
                {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"capabilities": {}}},
                {"jsonrpc": "2.0", "method": "initialized", "params": {}},
                {"jsonrpc": "2.0", "id": 2, "method": "codespec/stats", "params": params},
            ):
                sock.sendall(frame(message))
            stream = sock.makefile("rb")
            while (body := read_frame_sync(stream)) is not None:
                message = parse_json(body)
                if message.get("id") == 2:
                    return message.get("result")
    except (OSError, FramingError, ValueError):
        return None
    return None
