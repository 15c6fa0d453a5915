"""Languages: LSP languageId / file extension -> tree-sitter grammar and a few lexical facts.

Grammars come from the prebuilt per-language wheels on PyPI (``tree-sitter-python`` ...), loaded
lazily; nothing is downloaded or compiled at run time. A language without a grammar still gets
the generic rules (line, indentation and suffix rules) through ``Language.parser is None``.
"""

from __future__ import annotations

import importlib
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
    parser = language.parser
    if parser is None:
        return None
    return parser.parse(text.encode("utf-8")).root_node.has_error
