"""From the window a model rewrote to the edits shown (issue 53, item 4).

The model writes the whole updated window; what the user is offered is only where it differs
from the current one: line ranges and their new text (``difflib``, on lines). Some differences
are noise the field learned to drop (Copilot filters them too): changes of whitespace alone,
changes of import lines alone, and an edit that would undo the user's own last edit. No
difference left means no suggestion.
"""

from __future__ import annotations

import difflib
import re
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


def window_edits(current: str, updated: str) -> list[LineEdit]:
    """Where ``updated`` differs from ``current``, as line edits in window lines."""
    old_lines = current.splitlines(keepends=True)
    new_lines = updated.splitlines(keepends=True)
    matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    edits = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            edits.append(LineEdit(i1, i2, "".join(old_lines[i1:i2]), "".join(new_lines[j1:j2])))
    return edits


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


def filtered(current: str, updated: str, last_user_edit: Edit | None) -> list[LineEdit]:
    """The edits worth showing (empty: no suggestion)."""
    return [e for e in window_edits(current, updated) if worth_showing(e, last_user_edit)]
