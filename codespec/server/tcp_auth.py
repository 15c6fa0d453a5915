"""The door of the daemon's TCP port: a connection must first send ``codespec/auth`` with the
token from a 0600 file in the user config dir (compared in constant time), in a small frame and
promptly, or it is closed before anything is dispatched. Connections waiting at the door are
capped, the longest-waiting one making room, so idle ones cannot lock a real client out."""

from __future__ import annotations

import asyncio
import hmac
import logging

from ..files import parse_json
from .endpoint import AUTH, AUTH_REFUSED, TOKEN_FORMAT
from .framing import FramingError, frame, read_frame

log = logging.getLogger("codespec.daemon")
AUTH_TIMEOUT_S = 5.0  # an unauthenticated peer gets this long to send its token ...
AUTH_MAX_BODY = 4096  # ... in a frame this small
MAX_UNAUTHENTICATED = 16  # connections waiting to authenticate at once; more are closed


class TokenDoor:
    """Admits the TCP connections that present ``token``."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.waiting: dict[asyncio.StreamWriter, None] = {}  # oldest first

    async def admit(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Whether the connection authenticated; if not, it is closed (told why when it spoke
        the protocol with another token)."""
        if len(self.waiting) >= MAX_UNAUTHENTICATED:
            # make room by closing the connection that has waited longest: a local user
            # holding idle connections cannot lock real clients out (they authenticate
            # at once; an idle one waits AUTH_TIMEOUT_S at most anyway)
            oldest = next(iter(self.waiting))
            del self.waiting[oldest]
            oldest.close()
        self.waiting[writer] = None
        try:
            verdict = await authenticated(reader, self.token)
        finally:
            self.waiting.pop(writer, None)
        if verdict is True:
            return True
        if verdict == AUTH_REFUSED:  # it spoke the protocol: tell it why it is closed
            writer.write(frame({"jsonrpc": "2.0", "method": AUTH_REFUSED, "params": {}}))
        writer.close()
        return False


async def authenticated(reader: asyncio.StreamReader, token: str) -> bool | str:
    """True when the first frame, small and prompt, is ``codespec/auth`` with the token;
    ``AUTH_REFUSED`` when it is a well-formed ``codespec/auth`` with another token (a relay
    whose token changed: it is told); False for anything else (closed without a word)."""
    try:
        body = await asyncio.wait_for(read_frame(reader, AUTH_MAX_BODY), AUTH_TIMEOUT_S)
        message = parse_json(body) if body else None
    except (TimeoutError, FramingError, ValueError):
        log.debug("connection closed: no valid codespec/auth frame")
        return False
    if not isinstance(message, dict) or message.get("method") != AUTH:
        return False
    params = message.get("params")
    offered = params.get("token") if isinstance(params, dict) else None
    if not isinstance(offered, str) or not TOKEN_FORMAT.fullmatch(offered):
        return False  # an empty or malformed token never gets as far as a comparison
    return hmac.compare_digest(offered.encode(), token.encode()) or AUTH_REFUSED
