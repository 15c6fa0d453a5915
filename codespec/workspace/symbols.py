"""What a source file defines, as a completion elsewhere wants to see it: names and their
summaries (a function's signature and doc comment, a class's outline with its members'
signatures and fields, never whole bodies), from the tag queries the grammar wheels ship
(``queries/tags.scm``, the ones GitHub's code navigation uses).

Parsers here are this module's own, one per thread: the index reads files on its own thread
while the worker parses documents with ``languages.parse``.

The files are anybody's: a file of a few hundred thousand ``(`` parses quickly into a node
with as many children, and one tags query over that node runs for many seconds with the
interpreter held (its cost grows faster than the number of siblings). So the query runs in
pieces no larger than ``PIECE_NODES`` nodes, a node too large is matched at its own level and
its children taken one by one, and between pieces (calls into Python, where the other threads
get their turn) a file's work stops once it has used ``BUDGET_S``; what was found by then is
kept. The parse reads its input in chunks for the same reason.
"""

from __future__ import annotations

import importlib
import re
import textwrap
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import tree_sitter

from ..languages import LANGUAGES

# TypeScript's tag file names only what TypeScript adds; the rest is JavaScript's.
TAG_FILES = {
    "typescript": ("tree_sitter_javascript", "tree_sitter_typescript"),
    "typescriptreact": ("tree_sitter_javascript", "tree_sitter_typescript"),
}
CLASS_KINDS = {"class", "interface", "type", "module"}
MAX_SUMMARY_LINES = 24  # a class outline longer than this is cut
MAX_DOC_LINES = 3
# What stands for a body left out: a declaration as the language writes one without a body (a
# stub, a prototype, an interface member). A marker such as "{ ... }" would be copied into
# completions by the model (``docs/workspace.md``, "Measured").
BODY_LEFT_OUT = {"python": " ...", "lua": " end"}
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
BUDGET_S = 0.5  # one file's parse, query and summaries together (the module's docstring)
READ_CHUNK = 16 * 1024  # bytes the parser is given per read
PIECE_NODES = 4096  # the most nodes one query call may cover


@dataclass(frozen=True)
class Definition:
    name: str
    kind: str  # function | method | class | interface | type | constant | module | macro
    line: int  # 0-based line of the definition
    summary: str  # what a prompt shows of it


@dataclass(frozen=True)
class _Grammar:
    language: Any
    query: Any


_local = threading.local()


@cache
def _grammar(language: str) -> _Grammar | None:
    lang = LANGUAGES.get(language)
    if lang is None or not lang.module:
        return None
    try:
        grammar = tree_sitter.Language(
            getattr(importlib.import_module(lang.module), lang.function)()
        )
        sources = []
        for module in TAG_FILES.get(language, (lang.module,)):
            tags = (
                Path(importlib.import_module(module).__file__ or "").parent / "queries" / "tags.scm"
            )
            if tags.is_file():
                sources.append(tags.read_text(encoding="utf-8"))
        return (
            _Grammar(grammar, tree_sitter.Query(grammar, "\n".join(sources))) if sources else None
        )
    except (ImportError, AttributeError, ValueError, OSError, tree_sitter.QueryError):
        return None


def _parser(language: str, grammar: _Grammar) -> Any:
    parsers = getattr(_local, "parsers", None)
    if parsers is None:
        parsers = _local.parsers = {}
    if language not in parsers:
        parsers[language] = tree_sitter.Parser(grammar.language)
    return parsers[language]


def definitions(language: str, text: str, budget_s: float = BUDGET_S) -> list[Definition]:
    """The definitions in ``text``, in file order ([] for a language without tag queries);
    those found within ``budget_s`` when the file takes longer."""
    grammar = _grammar(language)
    if grammar is None:
        return []
    deadline = time.monotonic() + budget_s
    source = text.encode("utf-8")

    def read(offset: int, _point: object) -> bytes:  # past the deadline, the input ends here
        return source[offset : offset + READ_CHUNK] if time.monotonic() < deadline else b""

    tree = _parser(language, grammar).parse(read)
    found: dict[tuple[int, int], Definition] = {}
    for captures in _matches(grammar.query, tree.root_node, deadline):
        names = captures.get("name")
        node = next(
            (n for key, ns in captures.items() if key.startswith("definition.") for n in ns), None
        )
        if not names or node is None:
            continue
        kind = next(k for k in captures if k.startswith("definition.")).split(".", 1)[1]
        name = source[names[0].start_byte : names[0].end_byte].decode("utf-8", "replace")
        key = (node.start_byte, node.end_byte)
        if key in found:
            continue
        summary = _summary(node, kind, source, language)
        found[key] = Definition(name, kind, node.start_point[0], summary)
    return sorted(found.values(), key=lambda d: d.line)


def _matches(query: Any, root: Any, deadline: float) -> Iterator[dict[str, list[Any]]]:
    """The query's matches below ``root``, in pieces (the module's docstring), until the
    deadline."""
    pending = [root]
    while pending and time.monotonic() < deadline:
        node = pending.pop()
        cursor = tree_sitter.QueryCursor(query)
        if node.descendant_count > PIECE_NODES:  # this node's own matches; its children later
            cursor.set_max_start_depth(0)
            pending.extend(reversed(node.children))
        for _, captures in cursor.matches(node):
            yield captures


def _summary(node: Any, kind: str, source: bytes, language: str) -> str:
    """The definition with the bodies of the functions in it left out, its doc comment above
    it (or a Python docstring's first lines), at most ``MAX_SUMMARY_LINES`` lines."""
    start = _line_start(source, node.start_byte)
    body = node.child_by_field_name("body")
    if kind not in CLASS_KINDS and body is not None:
        text = source[start : body.start_byte].decode("utf-8", "replace").rstrip()
        doc = _docstring(body, source) if language == "python" else ""
        text = text + ("\n" + doc if doc else BODY_LEFT_OUT.get(language, ";"))
    else:
        text = _elide_bodies(node, source, start, language)
    lines = text.splitlines()
    if len(lines) > MAX_SUMMARY_LINES:
        lines = lines[:MAX_SUMMARY_LINES] + [
            lines[0][: len(lines[0]) - len(lines[0].lstrip())] + "    ..."
        ]
    comment = _comment_above(source, start, LANGUAGES[language].line_comment)
    return textwrap.dedent("\n".join(comment + lines))


def _elide_bodies(node: Any, source: bytes, start: int, language: str) -> str:
    """``node``'s text with the body of every function or method inside it replaced by
    ``...``: a class's outline."""
    cuts: list[tuple[int, int, str]] = []
    stack = list(node.children)
    while stack:
        child = stack.pop()
        body = (
            child.child_by_field_name("body")
            if "function" in child.type or "method" in child.type
            else None
        )
        if body is not None and body.end_byte <= node.end_byte:
            doc = _docstring(body, source) if language == "python" else ""
            cuts.append(
                (
                    body.start_byte,
                    body.end_byte,
                    ("\n" + doc) if doc else BODY_LEFT_OUT.get(language, ";"),
                )
            )
        else:
            stack.extend(child.children)
    out, at = [], start
    for begin, end, filler in sorted(cuts):
        if begin < at:
            continue
        out.append(source[at:begin].decode("utf-8", "replace").rstrip())
        out.append(filler)
        at = end
    out.append(source[at : node.end_byte].decode("utf-8", "replace"))
    return "".join(out)


def _docstring(body: Any, source: bytes) -> str:
    """A Python body's docstring, its first ``MAX_DOC_LINES`` lines, as written ("" if none)."""
    first = body.named_children[0] if body.named_children else None
    if first is None or first.type != "expression_statement" or not first.named_children:
        return ""
    string = first.named_children[0]
    if string.type != "string":
        return ""
    indent = source[_line_start(source, first.start_byte) : first.start_byte].decode(
        "utf-8", "replace"
    )
    lines = source[string.start_byte : string.end_byte].decode("utf-8", "replace").splitlines()
    if len(lines) > MAX_DOC_LINES:
        lines = lines[:MAX_DOC_LINES] + [lines[0][:3]]  # close the cut string with its quotes
    return indent + ("\n".join(lines))


def _comment_above(source: bytes, start: int, line_comment: str) -> list[str]:
    """The comment lines right above ``start`` (at most ``MAX_DOC_LINES``, nearest kept)."""
    lines = source[max(0, start - 2000) : start].decode("utf-8", "replace").split("\n")[:-1]
    kept: list[str] = []
    for line in reversed(lines):
        stripped = line.strip()
        if not stripped.startswith((line_comment, "*", "/*", "///")):
            break
        kept.insert(0, line)
    return kept[-MAX_DOC_LINES:]


def _line_start(source: bytes, offset: int) -> int:
    return source.rfind(b"\n", 0, offset) + 1


KEYWORDS = frozenset(
    """and as assert async await break case catch class const continue def default del defer
    do elif else enum except export extends false final finally fn for from func function go
    if impl import in interface is lambda let loop match mod mut new nil none not null or
    package pass pub raise return self static struct super switch this throw true try type
    typeof use var void while with yield int str bool float string print len range""".split()
)
