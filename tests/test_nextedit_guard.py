"""The next-edit guard (``nextedit/guard.py``): an edit that would leave the file broken, use a
name defined nowhere, or invent a definition the user's edits did not call for is refused; the
edits a rename calls for pass."""

from __future__ import annotations

from helpers import SHAPES

from codespec.languages import language_for
from codespec.nextedit.guard import (
    OVER_REACH,
    PARSE,
    UNDEFINED,
    UNEXPLAINED,
    applied,
    explained,
    refusal,
)

PYTHON = language_for("python")
# the reviewer's file, once the user renamed ``width`` to ``w`` in ``area()``
BEFORE = SHAPES.replace(
    "area(width, height):\n    return width *", "area(w, height):\n    return w *"
)
RENAMED = [("def area(width, height):\n", "def area(w, height):\n")]


def edit(first: int, end: int, new: str) -> tuple[str, range]:
    return applied(BEFORE, first, end, new)


def test_the_edit_a_rename_calls_for_passes():
    after, lines = edit(1, 2, "    return w * height\n")
    assert refusal(PYTHON, BEFORE, after, lines, RENAMED) is None
    # (and a rename threaded through describe's own lines: every name still defined)
    after, lines = edit(
        8,
        12,
        "def describe(w, height):\n    a = area(w, height)\n    p = perimeter(w, height)\n"
        '    return f"{w}x{height}: area {a}, perimeter {p}"\n',
    )
    assert refusal(PYTHON, BEFORE, after, lines, RENAMED) is None


def test_the_reviewers_edit_is_refused():
    """What the embedded model once offered: ``describe``'s lines rewritten, a ``main()``
    invented, the old return left inside it where ``a`` and ``p`` are undefined."""
    invented = (
        "def describe(w, height):\n"
        '    return f"{w}x{height}"\n\n\n'
        "def main():\n"
        '    width = float(input("width: "))\n'
        '    height = float(input("height: "))\n'
        '    return f"{width}x{height}: area {a}, perimeter {p}"\n'
    )
    after, lines = edit(8, 12, invented)
    assert refusal(PYTHON, BEFORE, after, lines, RENAMED) == UNDEFINED


def test_a_new_definition_nobody_asked_for_is_over_reach():
    after, lines = edit(12, 12, "\n\ndef main():\n    print(describe(2, 3))\n")
    assert refusal(PYTHON, BEFORE, after, lines, RENAMED) == OVER_REACH
    # the same definition, where the user's own edit named it: it follows from their edit
    assert refusal(PYTHON, BEFORE, after, lines, [("", "main()")]) is None


def test_an_edit_that_breaks_the_syntax_is_refused_in_any_language():
    after, lines = edit(4, 5, "def perimeter(width, height:\n")
    assert refusal(PYTHON, BEFORE, after, lines, RENAMED) == PARSE
    go = language_for("go")
    source = "package main\n\nfunc area(w int) int {\n\treturn w * w\n}\n"
    broken, at = applied(source, 3, 4, "\treturn w * (w\n")
    assert refusal(go, source, broken, at, []) == PARSE
    fine, at = applied(source, 3, 4, "\treturn w * w * 1\n")
    assert refusal(go, source, fine, at, []) is None


def test_a_name_the_file_already_lacked_is_not_the_edits_fault():
    before = "def f():\n    return helper(1)\n"  # (``helper`` comes from elsewhere: a star import)
    after, lines = applied(before, 1, 2, "    return helper(2)\n")
    assert refusal(PYTHON, before, after, lines, []) is None


def test_an_edit_the_recent_edits_do_not_explain_is_refused():
    """The rename introduced ``w`` and removed ``width``: an edit that uses ``w`` or takes out
    ``width`` follows from it; one that changes ``height`` alone does not."""
    old = "".join(BEFORE.splitlines(keepends=True)[8:12])
    follows = (old, old.replace("width", "w"))  # describe's parameter renamed, and its uses
    assert explained(follows, RENAMED)
    after, lines = edit(8, 12, follows[1])
    assert refusal(PYTHON, BEFORE, after, lines, RENAMED, follows) is None
    unrelated = ("    a = area(width, height)\n", "    a = area(width, height * 2)\n")
    assert not explained(unrelated, RENAMED)
    after, lines = edit(9, 10, unrelated[1])
    assert refusal(PYTHON, BEFORE, after, lines, RENAMED, unrelated) == UNEXPLAINED
