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

import bisect
import dataclasses
import re
import time
from collections.abc import Sequence
from copy import deepcopy
from dataclasses import dataclass, field

from lsprotocol import types

from ..nextedit.history import EditHistory
from ..numbers import finite_number

LINE_END = re.compile(r"\r\n|\r|\n")
MAX_DOCUMENT_CHARS = 4_000_000  # larger documents are kept in sync but get no completions
# Completions see at most this much text on each side of the cursor (a prompt needs far less;
# the syntax rules parse it): work per request does not grow with the document. The window's
# ends move in steps of WINDOW_STEP, so it stays put while the user types (its prompt stays
# cached).
WINDOW_CHARS = 200_000
WINDOW_STEP = 50_000
MAX_UINTEGER = 2**31 - 1  # LSP's uinteger


def read_position(given: object) -> types.Position:
    """An LSP ``Position`` from a client's raw params (a notification lsprotocol did not type):
    ``ValueError`` unless both fields are whole numbers from 0 that a double holds (JSON's
    ``1e400`` reads as infinity, and ``int`` of it would raise something else)."""
    if not isinstance(given, dict):
        raise ValueError("a position must be an object")
    line, character = (finite_number(given.get(name)) for name in ("line", "character"))
    if not all(v is not None and 0 <= v <= MAX_UINTEGER and v == int(v) for v in (line, character)):
        raise ValueError("a position's line and character must be whole numbers from 0")
    return types.Position(line=int(line or 0), character=int(character or 0))


def _units(char: str, encoding: str) -> int:
    code = ord(char)
    if encoding == "utf-8":
        return 1 if code < 0x80 else 2 if code < 0x800 else 3 if code < 0x10000 else 4
    if encoding == "utf-32":
        return 1
    return 2 if code >= 0x10000 else 1


def chars_in(line: str, units: int, encoding: str) -> int:
    """How many characters of ``line`` the first ``units`` code units of ``encoding`` cover; a
    character whose units are only partly covered is not counted (a position inside it means
    the place before it). Computed on encoded slices, not character by character: a keystroke
    at column 900,000 of a minified line costs microseconds, not a Python loop over the line."""
    head = line[:units]  # each character is at least one unit: the answer lies in here
    if encoding == "utf-32" or head.isascii():
        return len(head)
    if encoding == "utf-8":
        data = head.encode("utf-8", "surrogatepass")[:units]
        try:
            return len(data.decode("utf-8", "surrogatepass"))
        except UnicodeDecodeError as cut:  # inside a character at the end: stay before it
            return len(data[: cut.start].decode("utf-8", "surrogatepass"))
    data = head.encode("utf-16-le", "surrogatepass")[: 2 * units]
    covered = data.decode("utf-16-le", "surrogatepass")
    count = len(covered)
    if count and covered[-1] != head[count - 1]:  # half of a surrogate pair: before it
        count -= 1
    return count


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
    # where and when (``time.monotonic``) the last change was made: the "recently edited" range
    # other documents' prompts may show (``workspace/snippets.py``); None until an edit
    last_edit: tuple[int, float] | None = None
    # its recent edits and its text before them, for next-edit suggestions (``nextedit/``)
    history: EditHistory = field(init=False, repr=False)
    _starts: list[int] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.history = EditHistory.opened(self.text)  # (the same string: no copy until edited)

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
        units = max(position.character, 0)
        # each character is at least one unit: the answer lies in the first ``units`` of them
        return start + chars_in(self.text[start : min(end, start + units)], units, encoding)

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
        """Apply one change. Its cost follows the change, not the document: the position is
        found in C-speed slices of its line, and the line index is mended around the edit
        (lines after it shift), never rebuilt."""
        before, now = self.text, time.monotonic()
        if isinstance(change, types.TextDocumentContentChangePartial):
            a = self.offset_at(change.range.start, encoding)
            b = self.offset_at(change.range.end, encoding)
            a, b = min(a, b), max(a, b)
            inserted = change.text
            self.text = self.text[:a] + change.text + self.text[b:]
            self._mend_starts(a, b, len(change.text))
        else:  # the whole text: the edit is between what it shares at each end
            a = first_difference(self.text, change.text)
            tail = common_suffix(self.text, change.text, min(len(self.text), len(change.text)) - a)
            b, inserted = len(before) - tail, change.text[a : len(change.text) - tail]
            self.text = change.text
            self._starts = None
        self.history.record(before, a, before[a:b], inserted, now)
        self.edits += 1
        self.last_edit = (a, now)

    def edited_line(self) -> int | None:
        """The line of the last change (None: none since it was opened)."""
        if self.last_edit is None:
            return None
        return _last_le(self.line_starts(), min(self.last_edit[0], len(self.text)))

    def edited(self, changes: Sequence, encoding: str) -> Document:
        """A copy with ``changes`` applied, this document untouched (so that a thread can
        apply a costly message while the event loop goes on reading this one)."""
        starts = None if self._starts is None else list(self._starts)
        copy = dataclasses.replace(self, _starts=starts)
        copy.history = deepcopy(self.history)  # (its original text is shared, not copied)
        for change in changes:
            copy.apply(change, encoding)
        return copy

    def take(self, edited: Document) -> None:
        """Become ``edited`` (this document's ``edited`` copy), all at once."""
        self.text, self._starts, self.edits = edited.text, edited._starts, edited.edits
        self.last_edit, self.history = edited.last_edit, edited.history

    def _mend_starts(self, a: int, b: int, inserted: int) -> None:
        """The line index after text ``[a, b)`` became ``inserted`` characters. Starts before
        ``a`` stay; starts after ``b + 1`` shift; the ones between are found again in the new
        text from ``a - 1`` (a ``\r`` there may now pair with a ``\n``) to the old ``b + 1``
        (a ``\r\n`` across it is still one break: its start comes with the shifted ones)."""
        starts = self._starts
        if starts is None:
            return
        text, delta = self.text, inserted - (b - a)
        keep = max(bisect.bisect_left(starts, a), 1)  # (0 starts the first line, always)
        shift = bisect.bisect_right(starts, b + 1)
        tail = [start + delta for start in starts[shift:]]
        low, high = max(a - 1, 0), min(b + 1 + delta, len(text))
        between = []
        for match in LINE_END.finditer(text, low, high):
            end = match.end()
            split_pair = end == high and text[end - 1] == "\r" and text[end : end + 1] == "\n"
            if end >= a and not split_pair:  # (a lone \r cut from its \n by the scan's end)
                between.append(end)
        self._starts = starts[:keep] + between + tail

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


def first_difference(a: str, b: str, chunk: int = 4096) -> int:
    """Where ``a`` and ``b`` first differ (a whole-text change: where the edit was), comparing
    a chunk at a time so that a long document costs C-speed compares, not a Python loop."""
    n = min(len(a), len(b))
    at = 0
    while at < n and a[at : min(at + chunk, n)] == b[at : min(at + chunk, n)]:
        at += chunk
    at = min(at, n)
    end = min(at + chunk, n)
    while at < end and a[at] == b[at]:
        at += 1
    return at


def common_suffix(a: str, b: str, limit: int, chunk: int = 4096) -> int:
    """How many characters ``a`` and ``b`` share at their ends, at most ``limit``, compared a
    chunk at a time (as ``first_difference``)."""
    n = 0
    while n < limit:
        step = min(chunk, limit - n)
        if a[len(a) - n - step : len(a) - n] == b[len(b) - n - step : len(b) - n]:
            n += step
            continue
        while n < limit and a[len(a) - 1 - n] == b[len(b) - 1 - n]:
            n += 1
        return n
    return n


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
