"""Server-sent events, read with a bound: bytes in, ``data`` payloads out.

httpx reads lines without a limit, so a server that never sends a newline could fill the
daemon's memory; this parser counts every byte and refuses past ``limit``. Only what the
completions APIs use is kept: ``data:`` fields (joined by newlines when an event has several),
events ended by a blank line; comments and other fields are skipped (the SSE format).
"""

from __future__ import annotations


class StreamFault(Exception):
    """The server's stream cannot be used; ``reason`` is a few words for the log."""

    def __init__(
        self,
        reason: str,
        retry_after_s: float | None = None,
        retry: bool = True,
        hangs: bool = False,
    ):
        super().__init__(reason)
        self.reason = reason
        self.retry_after_s = retry_after_s
        self.retry = retry  # worth trying again (another URL, or later)
        # it failed by saying nothing until a timeout: a request that tries it again waits as
        # long, so only the engine's probe tries it again (``health.py``)
        self.hangs = hangs


class SseParser:
    """Feed it the stream's bytes in any pieces; it returns the complete events' data."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.seen = 0
        self._partial = b""
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[str]:
        self.seen += len(chunk)
        if self.seen > self.limit:
            raise StreamFault(f"response larger than {self.limit} bytes", retry=False)
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()
        events: list[str] = []
        for raw in lines:
            line = raw.removesuffix(b"\r")
            if not line:  # a blank line ends an event
                if self._data:
                    events.append("\n".join(self._data))
                    self._data = []
                continue
            if line.startswith(b":"):
                continue  # a comment (servers send them as keep-alives)
            name, _, value = line.partition(b":")
            if name != b"data":
                continue
            try:
                text = value.removeprefix(b" ").decode("utf-8")
            except UnicodeDecodeError:
                raise StreamFault("a stream line that is not UTF-8", retry=False) from None
            self._data.append(text)
        return events

    def close(self) -> list[str]:
        """The last event when the stream ends without its blank line."""
        events = self.feed(b"\n") if self._partial.strip() else []
        if self._data:
            events.append("\n".join(self._data))
            self._data = []
        return events
