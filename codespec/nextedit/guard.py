"""Whether a next edit may be shown: never one that leaves the file broken (issue 65, item 1).

The document is checked as it would be after Tab, against the document now:

* **parse**: the edit adds a tree-sitter ERROR or MISSING node (a file that did not parse
  before may still take an edit that adds no new error);
* **undefined name**: the edited lines use a name the file defines nowhere (Python, through
  pyflakes: imports, builtins, every scope's bindings, the edit's own), where the file before
  the edit did not already lack it;
* **over-reach**: the edit defines something new (a function, a class...) whose name the
  user's recent edits do not mention: a next edit follows from what the user did, it does not
  invent code;
* **unexplained**: the edit neither uses a word the recent edits introduced nor takes out one
  they removed (a rename's new name, a parameter threaded through, a removed argument's uses):
  nothing the user did calls for it.

A refused edit is not shown; its reason is kept in the stats row of the request
(``stop``: ``refused: parse`` ...), so eagerness can be tuned on how often each happens.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from typing import Any

from ..languages import Language, parse
from ..workspace.symbols import definitions
from .edits import LineEdit
from .history import EditHistory

PARSE, UNDEFINED, OVER_REACH, UNEXPLAINED = "parse", "undefined name", "over-reach", "unexplained"
REFUSALS = (PARSE, UNDEFINED, OVER_REACH, UNEXPLAINED)
WORD = re.compile(r"\w+")


def refusal(
    language: Language,
    before: str,
    after: str,
    edited: range,
    recent: Sequence[tuple[str, str]],
    replaced: tuple[str, str] | None = None,
) -> str | None:
    """Why the edit that turns ``before`` into ``after`` may not be shown (None: it may).
    ``edited``: the lines of ``after`` the edit wrote; ``recent``: the user's recent edits,
    (old lines, new lines) each; ``replaced``: the edit's own (old lines, new lines), for
    whether the recent edits explain it (None: not asked)."""
    if _errors(language, after) > _errors(language, before):
        return PARSE
    if _undefined(language, after, edited) - _undefined(language, before, None):
        return UNDEFINED
    if _invented(language, before, after, " ".join(new for _, new in recent)):
        return OVER_REACH
    if replaced is not None and not explained(replaced, recent):
        return UNEXPLAINED
    return None


def judged(
    language: Language,
    text: str,
    first: int,
    edit: LineEdit,
    history: EditHistory,
    must_follow: bool = True,
) -> str | None:
    """``refusal`` of ``edit`` (lines of the window that starts at line ``first`` of
    ``text``), against the document's recent edits; ``must_follow``: whether it must be
    explained by them (below the eagerness ``high``)."""
    after, lines = applied(text, first + edit.first, first + edit.end, edit.new)
    recent = [(made.old, made.new) for made in history.edits]
    replaced = (edit.old, edit.new) if must_follow else None
    return refusal(language, text, after, lines, recent, replaced)


def explained(replaced: tuple[str, str], recent: Sequence[tuple[str, str]]) -> bool:
    """Whether an edit (old lines, new lines) uses a word the ``recent`` edits introduced or
    takes out a word they removed."""
    old, new = (set(WORD.findall(text)) for text in replaced)
    introduced = {w for o, n in recent for w in set(WORD.findall(n)) - set(WORD.findall(o))}
    removed = {w for o, n in recent for w in set(WORD.findall(o)) - set(WORD.findall(n))}
    return bool((new - old) & introduced or (old - new) & removed)


def applied(text: str, first: int, end: int, new: str) -> tuple[str, range]:
    """``text`` with lines ``[first, end)`` replaced by ``new`` (whole lines), and the lines
    ``new`` takes there."""
    lines = text.splitlines(keepends=True)
    if first > 0 and first <= len(lines) and not lines[first - 1].endswith("\n"):
        lines[first - 1] += "\n"  # (a last line without its break, edited after)
    after = "".join(lines[:first]) + new + "".join(lines[end:])
    return after, range(first, first + len(new.splitlines()))


def _errors(language: Language, text: str) -> int:
    """ERROR and MISSING nodes in ``text``'s tree (0 where no grammar parses it)."""
    tree = parse(language, text)
    if tree is None:
        return 0
    count, stack = 0, [tree.root_node]
    while stack:
        node: Any = stack.pop()
        if node.is_error or node.is_missing:
            count += 1
        if node.has_error:  # (only a subtree with an error holds one)
            stack.extend(node.children)
    return count


def _undefined(language: Language, text: str, lines: range | None) -> set[str]:
    """Names used in ``lines`` of ``text`` (None: anywhere) that it defines nowhere. Python
    only, where pyflakes knows the scopes; other languages are checked for syntax and
    over-reach."""
    if language.name != "python":
        return set()
    from pyflakes import checker, messages

    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return set()  # (the parse check speaks for a file Python cannot read)
    found = checker.Checker(tree, filename="<edit>")
    return {
        str(message.message_args[0])
        for message in found.messages
        if isinstance(message, messages.UndefinedName)
        and (lines is None or message.lineno - 1 in lines)
    }


def _invented(language: Language, before: str, after: str, recent: str) -> bool:
    """Whether ``after`` defines a name ``before`` does not and ``recent`` never mentions."""
    had = {d.name for d in definitions(language.name, before)}
    new = {d.name for d in definitions(language.name, after)} - had
    return any(name not in recent for name in new)
