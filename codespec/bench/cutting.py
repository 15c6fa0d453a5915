"""Where to cut a hole in one source file: four kinds of span, each chosen with tree-sitter
and a seeded random stream (see ``corpus`` for what the kinds mean)."""

from __future__ import annotations

import random
from collections.abc import Iterator

from ..languages import Language


def _line_starts(text: str) -> list[int]:
    starts = [0]
    starts += [i + 1 for i, ch in enumerate(text) if ch == "\n"]
    return starts


def _is_code(line: str, lang: Language) -> bool:
    s = line.strip()
    return len(s) >= 12 and not s.startswith((lang.line_comment, "/*", "*", "#", "--"))


def cut_line(text: str, lang: Language, rng: random.Random) -> tuple[int, int] | None:
    """The rest of a code line, from just after a space, bracket, dot, comma, '=' or ':'."""
    lines = text.split("\n")
    starts = _line_starts(text)
    spots = [i for i in range(10, len(lines) - 3) if _is_code(lines[i], lang)]
    if not spots:
        return None
    i = rng.choice(spots)
    line = lines[i]
    indent = len(line) - len(line.lstrip())
    cuts = [
        p
        for p in range(indent + 1, len(line) - 4)
        if line[p - 1] in " (=.,[:{" and not line[p].isspace()
    ]
    p = rng.choice(cuts) if cuts else indent
    return starts[i] + p, starts[i] + len(line)


FUNCTION_TYPES = {
    "function_definition",
    "function_declaration",
    "method_definition",
    "method_declaration",
    "constructor_declaration",
    "function_item",
    "local_function",
}


def _nodes(text: str, lang: Language) -> Iterator:
    if lang.parser is None:
        return
    tree = lang.parser.parse(text.encode("utf-8"))
    stack = [tree.root_node]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(node.named_children))


def _pick_lines(text: str, spots: list[tuple[int, int]], rng: random.Random):
    """One of the (first, last) line ranges, as the span from the first line's indentation to
    the end of the last line."""
    if not spots:
        return None
    first, last = rng.choice(sorted(set(spots)))
    lines, starts = text.split("\n"), _line_starts(text)
    indent = len(lines[first]) - len(lines[first].lstrip())
    return starts[first] + indent, starts[last] + len(lines[last])


def cut_block(text: str, lang: Language, rng: random.Random) -> tuple[int, int] | None:
    """A statement spanning 2-8 lines that starts its line and ends at a line end."""
    if lang.parser is None:
        return None
    lines = text.split("\n")
    spots = []
    for node in _nodes(text, lang):
        first, last = node.start_point.row, node.end_point.row
        if not (1 <= last - first <= 7) or node.type in FUNCTION_TYPES or first < 5:
            continue
        if "comment" in node.type or "string" in node.type or node.parent is None:
            continue
        line = lines[first]  # tree-sitter columns count bytes
        if line.encode("utf-8")[: node.start_point.column].strip() or not _is_code(line, lang):
            continue
        if lines[last].encode("utf-8")[node.end_point.column :].strip() not in (b"", b";", b","):
            continue
        spots.append((first, last))
    return _pick_lines(text, spots, rng)


def cut_function(text: str, lang: Language, rng: random.Random) -> tuple[int, int] | None:
    """The body of a function: from the indentation of its first body line to the end of its
    last body line (a closing line such as ``}`` or ``end`` stays in the suffix)."""
    if lang.parser is None:
        return None
    lines = text.split("\n")
    spots = []
    for node in _nodes(text, lang):
        body = node.child_by_field_name("body")
        if node.type not in FUNCTION_TYPES or body is None:
            continue
        first = body.start_point.row
        if first == node.start_point.row or lines[first].strip() == "{":
            first += 1  # the body's opening brace ends a line; the body proper starts below
        last = node.end_point.row
        if not any(ch.isalnum() for ch in lines[last].strip().replace("end", "")):
            last -= 1  # the closing line
        if not (0 <= last - first <= 29) or first < 3:
            continue
        if sum(len(s.strip()) for s in lines[first : last + 1]) < 16:
            continue
        spots.append((first, last))
    return _pick_lines(text, spots, rng)


def cut_copy(text: str, lang: Language, rng: random.Random) -> tuple[int, int] | None:
    """Lines i.. that repeat (stripped, in order) lines j.. earlier in the file: at least two
    lines, at most six."""
    lines = text.split("\n")
    starts = _line_starts(text)
    first_seen: dict[tuple[str, str], int] = {}
    spots = []
    for i in range(len(lines) - 2):
        key = (lines[i].strip(), lines[i + 1].strip())
        if len(key[0]) >= 12 and len(key[1]) >= 8:
            j = first_seen.setdefault(key, i)
            if i - j > 2:
                spots.append((i, j))
    if not spots:
        return None
    i, j = rng.choice(spots)
    n = 2
    while n < 6 and j + n < i and lines[i + n].strip() == lines[j + n].strip() != "":
        n += 1
    if i + n >= len(lines) - 1:
        return None
    indent = len(lines[i]) - len(lines[i].lstrip())
    return starts[i] + indent, starts[i + n - 1] + len(lines[i + n - 1])


CUTTERS = {"line": cut_line, "block": cut_block, "function": cut_function, "copy": cut_copy}
KINDS = tuple(CUTTERS)
