"""Fill-in-the-middle prompts: text around the cursor -> token ids for the model.

Layout (Qwen2.5-Coder's repo-level format, as in its model card)::

    <|repo_name|>{repo}\\n<|file_sep|>{path}\\n{other file} ... <|file_sep|>{path}\\n
    <|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>

Extra files come first and the current file last, so the cached KV prefix stays stable while the
user types. Prefix and suffix are cut to token budgets at line boundaries: the prefix keeps its
last lines, the suffix its first lines.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .models import FimTokens


@dataclass(frozen=True)
class FimRequest:
    """The text around a cursor, plus optional context files ``(path, text)``."""

    prefix: str
    suffix: str
    path: str = ""
    repo: str = ""
    extra_files: tuple[tuple[str, str], ...] = ()


def split_at(text: str, line: int, column: int) -> tuple[str, str]:
    """Split ``text`` at a 0-based line and 0-based column (in characters).

    Raises ValueError when the position is outside the text.
    """
    lines = text.splitlines(keepends=True) or [""]
    if text.endswith("\n"):
        lines.append("")  # the empty line after a final newline is a valid cursor line
    if line < 0 or line >= len(lines):
        raise ValueError(f"line {line + 1} is past the end of the file ({len(lines)} lines)")
    body = lines[line].rstrip("\r\n")
    if column < 0 or column > len(body):
        raise ValueError(
            f"column {column + 1} is past the end of line {line + 1} ({len(body)} characters)"
        )
    offset = sum(len(x) for x in lines[:line]) + column
    return text[:offset], text[offset:]


def clip_prefix(tokenizer: Any, text: str, budget: int) -> str:
    """The longest tail of ``text`` that starts at a line start and fits ``budget`` tokens."""
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    if len(enc["input_ids"]) <= budget:
        return text
    start = enc["offset_mapping"][-budget][0]
    newline = text.find("\n", start - 1) if start > 0 else -1
    return text[newline + 1 :] if newline >= 0 else text[start:]


def clip_suffix(tokenizer: Any, text: str, budget: int) -> str:
    """The longest head of ``text`` that ends at a line end and fits ``budget`` tokens."""
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    if len(enc["input_ids"]) <= budget:
        return text
    end = enc["offset_mapping"][budget - 1][1] if budget > 0 else 0
    newline = text.rfind("\n", 0, end)
    return text[: newline + 1] if newline >= 0 else text[:end]


def build_fim_prompt(
    tokenizer: Any,
    tokens: FimTokens,
    request: FimRequest,
    prefix_tokens: int = 1024,
    suffix_tokens: int = 256,
    extra_tokens: int = 1024,
) -> list[int]:
    """Token ids of the FIM prompt for ``request``."""

    def encode(text: str) -> list[int]:
        return tokenizer.encode(text, add_special_tokens=False)

    def special(text: str) -> list[int]:
        return [tokenizer.convert_tokens_to_ids(text)]

    ids: list[int] = []
    repo_level = bool(tokens.file_sep) and (request.extra_files or request.path)
    if repo_level:
        if tokens.repo_name:
            ids += special(tokens.repo_name) + encode((request.repo or "workspace") + "\n")
        left = extra_tokens
        for path, text in request.extra_files:
            body = encode(f"{path}\n{text}")[:left]
            if not body:
                break
            ids += special(tokens.file_sep) + body
            left -= len(body)
        ids += special(tokens.file_sep) + encode(f"{request.path or 'untitled'}\n")
    prefix = clip_prefix(tokenizer, request.prefix, prefix_tokens)
    suffix = clip_suffix(tokenizer, request.suffix, suffix_tokens)
    ids += special(tokens.fim_prefix) + encode(prefix)
    ids += special(tokens.fim_suffix) + encode(suffix)
    ids += special(tokens.fim_middle)
    return ids
