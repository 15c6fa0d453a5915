"""A minimal raw JSON-RPC client over a socket, for tests that must send malformed bytes."""

from __future__ import annotations

import json
import socket
import time

from codespec.server.framing import frame


class RawClient:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.sock.settimeout(30)
        self.buffer = b""

    def send(self, payload: dict | bytes) -> None:
        self.sock.sendall(payload if isinstance(payload, bytes) else frame(payload))

    def read(self, timeout: float = 30) -> dict | None:
        """The next message, or None if the server closed the connection."""
        deadline = time.monotonic() + timeout
        while True:
            head, sep, rest = self.buffer.partition(b"\r\n\r\n")
            if sep:
                length = next(
                    int(h.split(b":")[1])
                    for h in head.split(b"\r\n")
                    if h.lower().startswith(b"content-length")
                )
                if len(rest) >= length:
                    self.buffer = rest[length:]
                    return json.loads(rest[:length])
            if time.monotonic() > deadline:
                raise TimeoutError("no message from the server")
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            self.buffer += chunk

    def closed(self, timeout: float = 10) -> bool:
        """Whether the server hangs up without sending anything first.

        A server that closes with our unread bytes in its buffer resets the connection
        instead of ending it; that is a hang-up too.
        """
        try:
            return self.read(timeout=timeout) is None
        except ConnectionResetError:
            return True
        except (TimeoutError, OSError):
            return False

    def next_reply(self, timeout: float = 30) -> dict | None:
        """The next reply (a message without a method), notifications skipped; None if the
        server closed the connection."""
        while (message := self.read(timeout)) is not None:
            if "method" not in message:
                return message
        return None

    def reply_to(self, msg_id) -> dict:
        """Read until the response to ``msg_id`` (skipping notifications)."""
        while True:
            message = self.read()
            assert message is not None, "connection closed"
            if message.get("id") == msg_id and "method" not in message:
                return message

    def initialize(self, msg_id=1, **capabilities) -> dict:
        self.send(
            {
                "jsonrpc": "2.0",
                "id": msg_id,
                "method": "initialize",
                "params": {"capabilities": capabilities, "processId": None},
            }
        )
        reply = self.reply_to(msg_id)
        self.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
        return reply


def inline_request(msg_id, uri, line, character, trigger_kind=1):
    """An inline completion request: invoked (1) or automatic, as typing triggers it (2)."""
    return {
        "jsonrpc": "2.0",
        "id": msg_id,
        "method": "textDocument/inlineCompletion",
        "params": {
            "textDocument": {"uri": uri},
            "position": {"line": line, "character": character},
            "context": {"triggerKind": trigger_kind},
        },
    }


def did_open(uri, text, language="python"):
    return {
        "jsonrpc": "2.0",
        "method": "textDocument/didOpen",
        "params": {
            "textDocument": {"uri": uri, "languageId": language, "version": 1, "text": text}
        },
    }


def folder_session(path, folders: list[str], options: dict, **capabilities) -> RawClient:
    """A client on the socket at ``path``, initialized with these workspace folder URIs,
    initialization options and capabilities."""
    client = unix_client(path)
    client.send(
        {
            "jsonrpc": "2.0",
            "id": "init",
            "method": "initialize",
            "params": {
                "processId": None,
                "capabilities": capabilities,
                "workspaceFolders": [{"uri": uri, "name": "w"} for uri in folders],
                "initializationOptions": options,
            },
        }
    )
    assert "result" in client.reply_to("init")
    client.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
    return client


def unix_client(path) -> RawClient:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(str(path))
    return RawClient(sock)


class _ProcessPipe:
    """A `codespec lsp` process's stdin/stdout, shaped like the socket RawClient expects: a
    read waits at most the timeout set (``TimeoutError`` then), as a socket's would."""

    def __init__(self, process) -> None:
        self.process = process
        self.timeout: float | None = 30

    def sendall(self, data: bytes) -> None:
        self.process.stdin.write(data)
        self.process.stdin.flush()

    def recv(self, size: int) -> bytes:
        import os
        import select

        fd = self.process.stdout.fileno()  # (read raw: a buffered reader would hide bytes)
        if not select.select([fd], [], [], self.timeout)[0]:
            raise TimeoutError("no bytes from the relay")
        return os.read(fd, size)

    def settimeout(self, timeout) -> None:
        self.timeout = timeout


def relay_client(*args: str):
    """Start `codespec lsp ARGS` and return (process, RawClient speaking through it)."""
    import subprocess
    import sys

    process = subprocess.Popen(
        [sys.executable, "-m", "codespec", "lsp", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    return process, RawClient(_ProcessPipe(process))
