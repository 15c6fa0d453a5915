"""LSP base-protocol framing on a byte stream, strict enough for a network-facing daemon.

pygls's own reader skips any header line it does not know, so an HTTP request (request line +
``Content-Length``) would be dispatched as JSON-RPC. Here every header line must look like an
LSP header, ``Content-Length`` is required and capped, and anything else ends the connection
before a byte of it is dispatched. A body that is not JSON gets a -32700 reply; one that is not
a JSON-RPC message gets -32600; the connection stays up for both.
"""

from __future__ import annotations

import asyncio
import json
import re

MAX_BODY = 64 << 20  # 64 MiB: far above any real document, far below trouble
MAX_HEADER_LINE = 1024
HEADER = re.compile(rb"^([A-Za-z][A-Za-z0-9-]*): ([^\r\n]*)\r\n$")


class FramingError(Exception):
    """The peer does not speak LSP framing: close the connection."""


class Headers:
    """LSP header lines, checked one at a time: ``feed`` each line (with its line end) until
    it returns True at the blank line; ``length`` is then the body's size."""

    def __init__(self, max_body: int = MAX_BODY) -> None:
        self.max_body = max_body
        self.length: int | None = None

    def feed(self, line: bytes) -> bool:
        if len(line) > MAX_HEADER_LINE:
            raise FramingError("header line too long")
        if line == b"\r\n":
            if self.length is None:
                raise FramingError("missing Content-Length")
            return True
        match = HEADER.match(line)
        if match is None:
            raise FramingError(f"not an LSP header: {line[:40]!r}")
        name, value = match.group(1).lower(), match.group(2)
        if name == b"content-length":
            if not value.isdigit() or len(value) > 12 or int(value) > self.max_body:
                raise FramingError(f"bad Content-Length {value[:20]!r}")
            self.length = int(value)
        return False


async def read_frame(reader: asyncio.StreamReader, max_body: int = MAX_BODY) -> bytes | None:
    """The next message body, or None at end of stream.

    A peer that resets the connection (a killed editor, a socket closed with bytes unread)
    has ended the stream as surely as one that closed it: that is None too, never an error."""
    headers = Headers(max_body)
    while True:
        try:
            line = await reader.readuntil(b"\n")
        except asyncio.IncompleteReadError as exc:
            if not exc.partial:
                return None
            raise FramingError("connection closed inside a header") from None
        except asyncio.LimitOverrunError:
            raise FramingError("header line too long") from None
        except ConnectionError:
            return None
        if headers.feed(line):
            break
    length = headers.length
    assert length is not None
    try:
        return await reader.readexactly(length)
    except asyncio.IncompleteReadError:
        raise FramingError("connection closed inside a body") from None
    except ConnectionError:
        return None


def read_frame_sync(stream, max_body: int = MAX_BODY) -> bytes | None:
    """``read_frame`` for a blocking byte stream (a pipe): the same checks."""
    headers = Headers(max_body)
    while True:
        line = stream.readline(MAX_HEADER_LINE + 1)
        if not line:
            return None
        if not line.endswith(b"\n") and len(line) <= MAX_HEADER_LINE:
            raise FramingError("stream closed inside a header")
        if headers.feed(line):
            break
    body = stream.read(headers.length)
    if len(body) != headers.length:
        raise FramingError("stream closed inside a body")
    return body


def frame(payload: dict) -> bytes:
    """Encode one JSON-RPC message with its header."""
    body = json.dumps(payload, separators=(",", ":")).encode("utf-8")
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def error_reply(msg_id, code: int, message: str) -> dict:
    return {"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}}


def check_message(body: bytes) -> tuple[dict | None, dict | None]:
    """(message, None) for a well-formed JSON-RPC message, else (None, error reply)."""
    try:
        message = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None, error_reply(None, -32700, "Parse error: the body is not JSON")
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        msg_id = message.get("id") if isinstance(message, dict) else None
        return None, error_reply(msg_id if _valid_id(msg_id) else None, -32600, "Invalid Request")
    if "method" in message and not isinstance(message["method"], str):
        return None, error_reply(
            message.get("id") if _valid_id(message.get("id")) else None,
            -32600,
            "Invalid Request: method must be a string",
        )
    if "method" not in message and "id" not in message:
        return None, error_reply(None, -32600, "Invalid Request")
    if "id" in message and not _valid_id(message["id"]) and message["id"] is not None:
        # JSON-RPC ids are strings or integers: an array, an object, a boolean or a fraction
        # is not echoed back (pygls would, or serve it), and the message is not run
        return None, error_reply(None, -32600, "Invalid Request: id must be a string or integer")
    return message, None


def _valid_id(msg_id) -> bool:
    return isinstance(msg_id, str | int) and not isinstance(msg_id, bool)
