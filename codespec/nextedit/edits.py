"""From the window a model rewrote to the edits shown (issue 53, item 4).

The model writes the whole updated window; what the user is offered is only where it differs
from the current one: line ranges and their new text (``difflib``, on lines). Some differences
are noise the field learned to drop (Copilot filters them too): changes of whitespace alone,
changes of import lines alone, and an edit that would undo the user's own last edit. No
difference left means no suggestion.

What is sent is one edit (``hunk``): Copilot's protocol reads the edits of an answer as
alternatives, and a client shows the first; so the edits worth showing become one range of
lines from the first to the last, the lines between them as they are now.

An edit is shown only where the model is sure of it (``confidence``): the least probability
the target gave any token it wrote in the changed lines, set against the user's eagerness.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass

from .history import Edit

# a line that only imports (Python, JS/TS, Go, Rust, Java/Kotlin, C/C++, C#)
IMPORT_LINE = re.compile(
    r"^\s*(import\b|from\s+\S+\s+import\b|use\s|using\s|#include\b|package\s|require\(|"
    r"(const|let|var)\s+\S+\s*=\s*require\()"
)


@dataclass(frozen=True)
class LineEdit:
    """Lines ``[first, end)`` of the window become ``new`` (whole lines with their breaks;
    ``first == end``: inserted before line ``first``)."""

    first: int
    end: int
    old: str
    new: str
    at: int = 0  # the line of the updated window where ``new`` starts


def window_edits(current: str, updated: str) -> list[LineEdit]:
    """Where ``updated`` differs from ``current``, as line edits in window lines."""
    old_lines = current.splitlines(keepends=True)
    new_lines = updated.splitlines(keepends=True)
    matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    edits = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            old, new = "".join(old_lines[i1:i2]), "".join(new_lines[j1:j2])
            edits.append(LineEdit(i1, i2, old, new, at=j1))
    return edits


def completed(current: str, written: str) -> str:
    """The updated window, where the model stopped before its end: a rewrite ends by writing
    the window's last line again, so one that did not said nothing of the lines it did not
    reach; they stay as they are. (Where it wrote its last line: ``written`` itself.)

    Which line it reached is read from the last lines it copied (``difflib``'s last matching
    block); lines it wrote after those replace as many of the current ones."""
    old, new = current.splitlines(keepends=True), written.splitlines(keepends=True)
    last = next((line for line in reversed(old) if line.strip()), None)
    if last is None or any(line.rstrip("\n") == last.rstrip("\n") for line in new[-3:]):
        return written
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    copied = [block for block in matcher.get_matching_blocks() if block.size]
    old_at, new_at = (
        (copied[-1].a + copied[-1].size, copied[-1].b + copied[-1].size) if copied else (0, 0)
    )
    reached = min(len(old), old_at + len(new) - new_at)
    return written + "".join(old[reached:])


def worth_showing(edit: LineEdit, last_user_edit: Edit | None) -> bool:
    """Whether an edit is more than noise: not whitespace alone, not imports alone, not the
    user's last edit undone."""
    if "".join(edit.old.split()) == "".join(edit.new.split()):
        return False
    changed = [line for line in (edit.old.splitlines() + edit.new.splitlines()) if line.strip()]
    if changed and all(IMPORT_LINE.match(line) for line in changed):
        return False
    return not (last_user_edit is not None and undoes(edit, last_user_edit))


def undoes(edit: LineEdit, user_edit: Edit) -> bool:
    """Whether ``edit`` puts back what the user's edit replaced: its old text holds the user's
    new lines and its new text the user's old ones, where the user's edit changed them."""
    before, after = user_edit.old.strip(), user_edit.new.strip()
    if not after or before == after:
        return False
    return after in edit.old and before in edit.new and after not in edit.new


# the least confidence an edit needs to be shown, per ``nextEditEagerness`` (see
# docs/benchmarks.md, "Next edits: `codespec bench --edits`", for how often each level draws an edit
# where none was needed and how often it keeps the right ones)
EAGERNESS = {"low": 0.5, "medium": 0.25, "high": 0.0}


def filtered(current: str, updated: str, last_user_edit: Edit | None) -> list[LineEdit]:
    """The edits worth showing (empty: no suggestion)."""
    return [e for e in window_edits(current, updated) if worth_showing(e, last_user_edit)]


def hunk(current: str, shown: list[LineEdit]) -> LineEdit | None:
    """The edits worth showing as one edit: lines from the first one's to the last one's end,
    with those edits applied and the lines between them as ``current`` has them."""
    if not shown:
        return None
    lines = current.splitlines(keepends=True)
    first, end = shown[0].first, shown[-1].end
    new, line = [], first
    for edit in shown:
        new += lines[line : edit.first]
        new.append(edit.new)
        line = edit.end
    return LineEdit(first, end, "".join(lines[first:end]), "".join(new), at=shown[0].at)


def confidence(updated: str, edit: LineEdit, spans: list[tuple[int, int]], p: list[float]) -> float:
    """The least probability of a token the model wrote in ``edit``'s new lines (for lines
    deleted: of the token that goes on past them). ``spans[i]`` is the characters of
    ``updated`` token ``i`` wrote, ``p[i]`` the target's probability of it."""
    starts = [0]
    for line in updated.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    begin = starts[min(edit.at, len(starts) - 1)]
    end = max(begin + len(edit.new), begin + 1)  # (a deletion: the token that skips the lines)
    inside = [p[i] for i, (a, b) in enumerate(spans[: len(p)]) if a < end and b > begin]
    return min(inside, default=1.0)


def token_spans(decode: Callable[[list[int]], str], tokens: list[int]) -> list[tuple[int, int]]:
    """The characters of the decoded text each token wrote (a token that completes a character
    started by the one before it takes that character)."""
    spans, done = [], 0
    for i in range(len(tokens)):
        length = len(decode(tokens[: i + 1]))
        spans.append((done, max(length, done)))
        done = max(length, done)
    return spans
