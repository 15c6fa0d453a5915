"""Languages: LSP languageId / file extension -> tree-sitter grammar and a few lexical facts,
and the syntax trees of texts in them.

Grammars come from the prebuilt per-language wheels on PyPI (``tree-sitter-python`` ...), loaded
lazily; nothing is downloaded or compiled at run time. A language without a grammar still gets
the generic rules (line, indentation and suffix rules) through ``Language.parser is None``.

A request parses its document several times (is the cursor in a comment? did the file parse
before? does it parse with the completion so far?), each time with a small change from the
parse before: ``parse`` tells tree-sitter what changed since the language's previous parse, so
it reparses only around the change (a 120 KB Python file: ~2 ms instead of ~20).
"""

from __future__ import annotations

import importlib
import threading
from dataclasses import dataclass, field
from functools import cache
from pathlib import PurePath
from typing import Any


@dataclass(frozen=True)
class Language:
    """What the completion rules need to know about one language."""

    name: str
    module: str = ""  # the grammar wheel's module, e.g. "tree_sitter_python"
    function: str = "language"  # the function in it that returns the grammar
    indent_blocks: bool = False  # blocks are made by indentation (Python)
    line_comment: str = "//"
    block_openers: tuple[str, ...] = ("{",)  # line endings that open a block
    extensions: tuple[str, ...] = field(default_factory=tuple)

    @property
    def parser(self) -> Any | None:
        """A tree-sitter parser for this language, or None when no grammar is installed."""
        return _parser(self.module, self.function) if self.module else None


LANGUAGES: dict[str, Language] = {
    lang.name: lang
    for lang in (
        Language(
            "python",
            "tree_sitter_python",
            indent_blocks=True,
            line_comment="#",
            block_openers=(":",),
            extensions=(".py", ".pyi"),
        ),
        Language(
            "javascript", "tree_sitter_javascript", extensions=(".js", ".mjs", ".cjs", ".jsx")
        ),
        Language(
            "typescript",
            "tree_sitter_typescript",
            "language_typescript",
            extensions=(".ts", ".mts", ".cts"),
        ),
        Language("typescriptreact", "tree_sitter_typescript", "language_tsx", extensions=(".tsx",)),
        Language("go", "tree_sitter_go", extensions=(".go",)),
        Language("rust", "tree_sitter_rust", extensions=(".rs",)),
        Language("java", "tree_sitter_java", extensions=(".java",)),
        Language("c", "tree_sitter_c", extensions=(".c", ".h")),
        Language(
            "cpp", "tree_sitter_cpp", extensions=(".cc", ".cpp", ".cxx", ".hpp", ".hh", ".hxx")
        ),
        Language(
            "lua",
            "tree_sitter_lua",
            line_comment="--",
            block_openers=("then", "do", "else", ")", "{", "repeat"),
            extensions=(".lua",),
        ),
        Language(
            "shellscript",
            "tree_sitter_bash",
            line_comment="#",
            block_openers=("then", "do", "else", "{", "in"),
            extensions=(".sh", ".bash"),
        ),
    )
}
ALIASES = {
    "tsx": "typescriptreact",
    "javascriptreact": "javascript",
    "bash": "shellscript",
    "sh": "shellscript",
    "c++": "cpp",
    "py": "python",
}
GENERIC = Language("plaintext", block_openers=("{", ":"))


def language_for(language_id: str | None = None, path: str | None = None) -> Language:
    """The language for an LSP languageId, else for the file extension, else the generic one."""
    if language_id:
        key = ALIASES.get(language_id.lower(), language_id.lower())
        if key in LANGUAGES:
            return LANGUAGES[key]
    if path:
        suffix = PurePath(path).suffix.lower()
        for lang in LANGUAGES.values():
            if suffix in lang.extensions:
                return lang
    return GENERIC


@cache
def _parser(module: str, function: str) -> Any | None:
    try:
        import tree_sitter

        grammar = getattr(importlib.import_module(module), function)()
        return tree_sitter.Parser(tree_sitter.Language(grammar))
    except (ImportError, AttributeError, ValueError):
        return None


def has_syntax_error(language: Language, text: str) -> bool | None:
    """Whether ``text`` has a syntax error (None when there is no grammar)."""
    tree = parse(language, text)
    return None if tree is None else tree.root_node.has_error


# each parser's latest (source, tree): the next parse starts from it
_latest: dict[Any, tuple[bytes, Any]] = {}
_parse_lock = threading.Lock()  # parsers are shared by the LSP thread and the engine's


def parse(language: Language, text: str) -> Any | None:
    """The tree-sitter tree of ``text`` (None when there is no grammar): the same tree as a
    fresh parse, computed incrementally from this parser's previous one. Returned trees are
    never changed afterwards."""
    parser = language.parser
    if parser is None:
        return None
    source = text.encode("utf-8")
    with _parse_lock:
        latest = _latest.get(parser)
        if latest is not None and latest[0] == source:
            return latest[1]
        if latest is None:
            tree = parser.parse(source)
        else:
            old = latest[1].copy()  # edited in place: the tree handed out stays as it was
            old.edit(**_edit(latest[0], source))
            tree = parser.parse(source, old)
        _latest[parser] = (source, tree)
    return tree


def _edit(old: bytes, new: bytes) -> dict[str, Any]:
    """The one-range edit that turns ``old`` into ``new``, as ``Tree.edit`` takes it: the
    bytes both share at the start and at the end stay, the range between was replaced."""
    start = _shared_length(old, new, lambda n: old[:n] == new[:n])
    room = min(len(old), len(new)) - start  # the shared end must not overlap the start
    end = _shared_length(old, new, lambda n: old[len(old) - n :] == new[len(new) - n :], room)
    old_end, new_end = len(old) - end, len(new) - end
    return dict(
        start_byte=start,
        old_end_byte=old_end,
        new_end_byte=new_end,
        start_point=_point(old, start),
        old_end_point=_point(old, old_end),
        new_end_point=_point(new, new_end),
    )


def _shared_length(old: bytes, new: bytes, shared, limit: int | None = None) -> int:
    """The largest n <= ``limit`` with ``shared(n)`` (true up to some n, false after): a binary
    search of slice comparisons, each a memcmp."""
    low, high = 0, min(len(old), len(new)) if limit is None else limit
    while low < high:
        middle = (low + high + 1) // 2
        if shared(middle):
            low = middle
        else:
            high = middle - 1
    return low


def _point(source: bytes, offset: int) -> tuple[int, int]:
    """(row, byte column) of ``offset``, as tree-sitter counts them."""
    return source.count(b"\n", 0, offset), offset - (source.rfind(b"\n", 0, offset) + 1)
