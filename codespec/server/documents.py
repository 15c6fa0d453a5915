"""The documents a session opened: text sync and LSP positions, with nothing read from disk.

LSP positions are (line, character) where lines end at ``\\n``, ``\\r\\n`` or ``\\r`` only (not at
the other characters Python's ``splitlines`` breaks on) and characters count code units of the
negotiated encoding (utf-16 by default, utf-8 when both sides agree). Every position a client
sends is clamped into the document before use: a line past the end means the end of the
document, a character past the end of its line means the end of that line (never inside its
line break, never inside a character's code units). Changes apply in arrival order; a
document's ``edits`` counts them, so a result can be checked against the text it was computed
for whatever version numbers the client sends.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from lsprotocol import types

LINE_END = re.compile(r"\r\n|\r|\n")
MAX_DOCUMENT_CHARS = 4_000_000  # larger documents are kept in sync but get no completions
# Completions see at most this much text on each side of the cursor (a prompt needs far less;
# the syntax rules parse it): work per request does not grow with the document. The window's
# ends move in steps of WINDOW_STEP, so it stays put while the user types (its prompt stays
# cached).
WINDOW_CHARS = 200_000
WINDOW_STEP = 50_000


def _units(char: str, encoding: str) -> int:
    code = ord(char)
    if encoding == "utf-8":
        return 1 if code < 0x80 else 2 if code < 0x800 else 3 if code < 0x10000 else 4
    if encoding == "utf-32":
        return 1
    return 2 if code >= 0x10000 else 1


def units_of(text: str, encoding: str) -> int:
    """The length of ``text`` in code units of ``encoding``."""
    if encoding == "utf-32":
        return len(text)
    if encoding == "utf-8":
        return len(text.encode("utf-8", "surrogatepass"))
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


@dataclass
class Document:
    uri: str
    text: str
    version: int | None = None
    language_id: str = ""
    edits: int = 0  # changes applied since it was opened
    _starts: list[int] | None = field(default=None, repr=False)

    # -- lines ------------------------------------------------------------------------------

    def line_starts(self) -> list[int]:
        """Offsets where each line begins (the last line may be empty)."""
        if self._starts is None:
            self._starts = [0] + [m.end() for m in LINE_END.finditer(self.text)]
        return self._starts

    def line_span(self, line: int) -> tuple[int, int]:
        """Offsets of a line's first character and of its end, before its line break."""
        starts = self.line_starts()
        start = starts[line]
        end = starts[line + 1] if line + 1 < len(starts) else len(self.text)
        while end > start and self.text[end - 1] in "\r\n":
            end -= 1
        return start, end

    # -- positions --------------------------------------------------------------------------

    def offset_at(self, position: types.Position, encoding: str = "utf-16") -> int:
        """The character offset of a (clamped) position."""
        starts = self.line_starts()
        if position.line < 0:
            return 0
        if position.line >= len(starts):
            return len(self.text)
        start, end = self.line_span(position.line)
        left = max(position.character, 0)
        offset = start
        while offset < end and left > 0:
            need = _units(self.text[offset], encoding)
            if need > left:  # inside a character's code units: stay before it
                break
            left -= need
            offset += 1
        return offset

    def position_at(self, offset: int, encoding: str = "utf-16") -> types.Position:
        starts = self.line_starts()
        offset = max(0, min(offset, len(self.text)))
        line = _last_le(starts, offset)
        start = starts[line]
        return types.Position(line=line, character=units_of(self.text[start:offset], encoding))

    def clamp(self, position: types.Position, encoding: str = "utf-16") -> types.Position:
        """The position the client meant, inside the document."""
        return self.position_at(self.offset_at(position, encoding), encoding)

    # -- edits ------------------------------------------------------------------------------

    def apply(self, change: types.TextDocumentContentChangeEvent, encoding: str) -> None:
        if isinstance(change, types.TextDocumentContentChangePartial):
            a = self.offset_at(change.range.start, encoding)
            b = self.offset_at(change.range.end, encoding)
            a, b = min(a, b), max(a, b)
            self.text = self.text[:a] + change.text + self.text[b:]
        else:
            self.text = change.text
        self._starts = None
        self.edits += 1

    def split(self, offset: int) -> tuple[str, str]:
        """The text before and after ``offset``, each cut to a window that starts and ends at
        a line boundary and does not move while the cursor stays in a region."""
        text = self.text
        start = max(0, offset - WINDOW_CHARS) // WINDOW_STEP * WINDOW_STEP
        if start:
            start = text.find("\n", start - 1) + 1 or offset
            start = min(start, offset)
        end = -(-(offset + WINDOW_CHARS) // WINDOW_STEP) * WINDOW_STEP
        if end < len(text):
            cut = text.rfind("\n", offset, end)
            end = cut + 1 if cut >= 0 else end
        return text[start:offset], text[offset:end]

    @property
    def too_large(self) -> bool:
        return len(self.text) > MAX_DOCUMENT_CHARS


def _last_le(values: list[int], x: int) -> int:
    """Index of the last value <= x in an ascending list (values[0] <= x)."""
    lo, hi = 0, len(values) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if values[mid] <= x:
            lo = mid
        else:
            hi = mid - 1
    return lo


def change_end_offset(doc: Document, change, encoding: str) -> int | None:
    """Where the cursor is after a change was applied (None for a whole-document change)."""
    if not isinstance(change, types.TextDocumentContentChangePartial):
        return None
    start = doc.offset_at(change.range.start, encoding)
    return start + len(change.text)
