"""Whether a next edit is worth asking for at all (issue 65, item 3): some edits cannot call for
another, and running the model after them costs seconds of the worker for nothing.

The user's last edit calls for none when it changed only whitespace, only a comment's words
(every line it touched, before and after, is a comment), or wrote fresh code on lines that were
blank (nothing existing was renamed, threaded or changed, so nothing else follows from it).
"""

from __future__ import annotations

from ..languages import Language
from .history import Edit, EditHistory


def worth_asking(history: EditHistory, language: Language) -> bool:
    """Whether the document's recent edits may call for a next edit (no edit yet: none)."""
    if not history.edits:
        return False
    last = history.edits[-1]
    return not (_whitespace(last) or _comment(last, language) or _fresh(last))


def _whitespace(edit: Edit) -> bool:
    return "".join(edit.old.split()) == "".join(edit.new.split())


def _comment(edit: Edit, language: Language) -> bool:
    marker = language.line_comment
    lines = [line.strip() for line in (edit.old + edit.new).splitlines() if line.strip()]
    return bool(marker) and bool(lines) and all(line.startswith(marker) for line in lines)


def _fresh(edit: Edit) -> bool:
    return not edit.old.strip()
