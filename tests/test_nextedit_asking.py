"""Which edits call for a next edit at all (``nextedit/asking.py``): a rename does; whitespace,
a comment's words and fresh code on a blank line do not, and the model is not asked."""

from __future__ import annotations

import pytest

from codespec.languages import language_for
from codespec.nextedit.asking import worth_asking
from codespec.nextedit.history import EditHistory

TEXT = "def total(items):\n    # the sum of the items\n    count = 0\n\n    return count\n"
PYTHON = language_for("python")


def after(at: str, removed: str, inserted: str, text: str = TEXT) -> EditHistory:
    history = EditHistory.opened(text)
    start = text.index(at)
    history.record(text, start, removed, inserted, now=0.0)
    return history


@pytest.mark.parametrize(
    ("edit", "asks"),
    [
        (("count = 0", "count", "subtotal"), True),  # a rename: its uses follow
        (("(items)", "items", "items, tax"), True),  # a parameter threaded through
        ((" = 0", " ", "  "), False),  # whitespace
        (("the sum", "sum", "total"), False),  # a comment's words
        (("\n    return", "", "    log(count)"), False),  # fresh code on the blank line
    ],
)
def test_which_edits_call_for_a_next_edit(edit, asks):
    assert worth_asking(after(*edit), PYTHON) is asks


def test_a_document_nobody_edited_calls_for_none():
    assert not worth_asking(EditHistory.opened(TEXT), PYTHON)
