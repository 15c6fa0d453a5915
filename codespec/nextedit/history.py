"""A document's recent edits, as a next-edit prompt shows them (issue 53, item 1).

The daemon already applies every ``didChange``; each change is also recorded here, with the
whole lines it touched before and after it (what Sweep's prompt format shows: ``original:`` and
``updated:`` lines). Keystrokes that continue one another (typing a word, deleting back into
it) are coalesced into one edit, so the history says "renamed ``total`` to ``subtotal``", not a
dozen keystrokes. The history is bounded in count and size; the oldest edits go first. The text
as it was when the session opened the document is kept too (the window "before the session's
edits"), unless the document is too large to keep twice.

Everything here is a pure function of the changes given: no clock is read (the caller passes
``now``), nothing is read from disk.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_EDITS = 8  # edits kept per document (a prompt shows the last few)
MAX_EDIT_CHARS = 2_000  # lines of an edit beyond this (a paste, a reformat) are cut
MAX_ORIGINAL_CHARS = 400_000  # larger documents keep no original text
COALESCE_S = 5.0  # keystrokes further apart in time than this are separate edits


@dataclass
class Edit:
    """The whole lines an edit touched, before (``old``) and after (``new``) it.

    ``start`` and ``end`` bound the changed characters in the text after the edit (where a next
    keystroke continues it); ``line`` is the first touched line's number there."""

    old: str
    new: str
    line: int
    start: int
    end: int
    at: float  # when its last keystroke came (the caller's clock)

    def continued_by(self, start: int, removed: str, now: float) -> bool:
        """Whether a change replacing ``removed`` at ``start`` continues this edit: it touches
        the edit's characters or their ends (typing on, deleting back past either end, retyping
        inside), soon after it."""
        return (
            now - self.at <= COALESCE_S and start <= self.end and start + len(removed) >= self.start
        )

    def grow(self, start: int, removed: str, inserted: str) -> None:
        """Widen the changed span by a change that continues it (``continued_by``)."""
        change_end = start + len(removed)
        if self.end >= change_end:
            self.end += len(inserted) - len(removed)
        else:
            self.end = start + len(inserted)
        self.start = min(self.start, start)


@dataclass
class EditHistory:
    """One document's recent edits and its text before them."""

    original: str | None  # the text when the session opened it (None: too large to keep)
    edits: list[Edit] = field(default_factory=list)

    @classmethod
    def opened(cls, text: str) -> EditHistory:
        return cls(text if len(text) <= MAX_ORIGINAL_CHARS else None)

    def record(self, before: str, start: int, removed: str, inserted: str, now: float) -> None:
        """A change was applied to ``before``: ``removed`` at ``start`` became ``inserted``."""
        if removed == inserted:
            return
        after = before[:start] + inserted + before[start + len(removed) :]
        last = self.edits[-1] if self.edits else None
        if last is not None and last.continued_by(start, removed, now):
            # the same edit, grown: its old lines stay, its new lines are read again
            last.grow(start, removed, inserted)
            last.new = _cut(_lines_around(after, last.start, last.end)[0])
            last.at = now
            if last.new == last.old:  # typed and deleted back to where it was: no edit
                self.edits.pop()
            return
        old, _ = _lines_around(before, start, start + len(removed))
        new, line = _lines_around(after, start, start + len(inserted))
        self.edits.append(Edit(_cut(old), _cut(new), line, start, start + len(inserted), now))
        del self.edits[:-MAX_EDITS]

    def recent(self, count: int) -> list[Edit]:
        """The last ``count`` edits, oldest first."""
        return self.edits[-count:] if count > 0 else []


def _lines_around(text: str, start: int, end: int) -> tuple[str, int]:
    """The whole lines holding ``text[start:end]`` (without the last line break), and the
    number of the first of them."""
    first = text.rfind("\n", 0, start) + 1
    last = text.find("\n", max(end, first))
    return text[first : last if last >= 0 else len(text)], text.count("\n", 0, first)


def _cut(text: str) -> str:
    return text if len(text) <= MAX_EDIT_CHARS else text[:MAX_EDIT_CHARS]
