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
    """The whole lines an edit touched, before (``old``) and after (``new``) it (at most
    ``MAX_EDIT_CHARS`` on either side of the change: a minified line is not copied whole).

    ``start`` and ``end`` bound the changed characters in the text after the edit (where a next
    keystroke continues it)."""

    old: str
    new: str
    start: int
    end: int
    at: float  # when its last keystroke came (the caller's clock)

    def continued_by(self, start: int, removed: str, now: float) -> bool:
        """Whether a change replacing ``removed`` at ``start`` continues this edit: it touches
        the edit's characters or their ends (typing on, deleting back past either end, retyping
        inside), soon after it."""
        soon = now - self.at <= COALESCE_S
        return soon and start <= self.end and start + len(removed) >= self.start


@dataclass
class EditHistory:
    """One document's recent edits and its text before them."""

    original: str | None  # the text when the session opened it (None: too large to keep)
    edits: list[Edit] = field(default_factory=list)

    @classmethod
    def opened(cls, text: str) -> EditHistory:
        return cls(text if len(text) <= MAX_ORIGINAL_CHARS else None)

    def record(self, before: str, start: int, removed: str, inserted: str, now: float) -> None:
        """A change was applied to ``before``: ``removed`` at ``start`` became ``inserted``.
        Its cost follows the change and its lines, not the document."""
        if removed == inserted:
            return
        end = start + len(removed)
        last = self.edits[-1] if self.edits else None
        if last is not None and last.continued_by(start, removed, now):
            # the same edit, grown: its old lines stay, its new lines are read again around
            # the union of its span and this change's
            _, last.new = _lines(
                before, min(last.start, start), max(last.end, end), start, end, inserted
            )
            last.end = (
                last.end + len(inserted) - len(removed)
                if last.end >= end
                else start + len(inserted)
            )
            last.start = min(last.start, start)
            last.at = now
            if last.new == last.old:  # typed and deleted back to where it was: no edit
                self.edits.pop()
            return
        old, new = _lines(before, start, end, start, end, inserted)
        self.edits.append(Edit(old, new, start, start + len(inserted), now))
        del self.edits[:-MAX_EDITS]

    def recent(self, count: int) -> list[Edit]:
        """The last ``count`` edits, oldest first."""
        return self.edits[-count:] if count > 0 else []


def _lines(
    before: str, first: int, last: int, start: int, end: int, inserted: str
) -> tuple[str, str]:
    """The whole lines of ``before`` holding ``[first, last)``, and the same lines once
    ``before[start:end]`` became ``inserted`` (the change lies inside them), without their last
    line break. Bounded: at most a quarter of ``MAX_EDIT_CHARS`` of a line on each side of the
    span, and half of it of the text removed or inserted (a paste, a minified line)."""
    side, middle = MAX_EDIT_CHARS // 4, MAX_EDIT_CHARS // 2
    floor = max(0, first - side)
    low = max(before.rfind("\n", floor, first) + 1, floor)
    ceiling = min(len(before), last + side)
    high = before.find("\n", last, ceiling)
    high = high if high >= 0 else ceiling
    old = before[low:start] + before[start:end][:middle] + before[end:high]
    return old, before[low:start] + inserted[:middle] + before[end:high]
