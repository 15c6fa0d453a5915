"""Fill-in-the-middle prompts: text around the cursor -> token ids for the model.

Layout (Qwen2.5-Coder's repo-level format, as in its model card)::

    <|repo_name|>{repo}\\n<|file_sep|>{path}\\n{other file} ... <|file_sep|>{path}\\n
    <|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>

Only the layout's markers are special tokens: the user's text, the workspace's and other files'
is tokenized as plain text (``tokenizer.plain_ids``), so a file that spells ``<|fim_middle|>``
cannot reshape the prompt. Extra files come first and the current file last, so the cached KV
prefix stays stable while the user types. Prefix and suffix are cut to token budgets at line
boundaries: the prefix keeps its last lines (and its first line while the cursor moves nearby,
see ``clip_prefix``), the suffix its first lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from .models import FimTokens
from .tokenizer import plain_encoding, plain_ids


@dataclass(frozen=True)
class FimRequest:
    """The text around a cursor, plus optional context files ``(path, text)``."""

    prefix: str
    suffix: str
    path: str = ""
    repo: str = ""
    extra_files: tuple[tuple[str, str], ...] = ()
    prefix_from: int | None = None  # where the last prefix window began (``clip_prefix``)


LINE_BREAK = re.compile(r"\r\n|\r|\n")


def split_at(text: str, line: int, column: int) -> tuple[str, str]:
    """Split ``text`` at a 0-based line and 0-based column (in characters).

    Raises ValueError when the position is outside the text.
    """
    # Lines end where LSP and editors end them (not at the form feeds and Unicode separators
    # that ``str.splitlines`` also breaks on); the empty line after a final newline counts.
    starts = [0] + [m.end() for m in LINE_BREAK.finditer(text)]
    if line < 0 or line >= len(starts):
        raise ValueError(f"line {line + 1} is past the end of the file ({len(starts)} lines)")
    end = starts[line + 1] if line + 1 < len(starts) else len(text)
    body = text[starts[line] : end].removesuffix("\n").removesuffix("\r")
    if column < 0 or column > len(body):
        raise ValueError(
            f"column {column + 1} is past the end of line {line + 1} ({len(body)} characters)"
        )
    offset = starts[line] + column
    return text[:offset], text[offset:]


# No token is longer than this many characters, so a window of ``budget * MAX_CHARS_PER_TOKEN``
# characters holds at least ``budget`` tokens: text is cut to that before it is tokenized, and
# a multi-megabyte document costs no more to prompt than a small one.
MAX_CHARS_PER_TOKEN = 32
# Names in the prompt (the file's path, other documents' paths, the repository's) come from the
# client: each is cut to its last characters, so a long URI costs a name's tokens, not its own.
MAX_NAME_CHARS = 160


def name_in_prompt(name: str) -> str:
    """``name`` as the prompt shows it: whole, or its end when longer than ``MAX_NAME_CHARS``
    (the end names the file), on one line."""
    name = name.replace("\n", " ").replace("\r", " ")
    return name if len(name) <= MAX_NAME_CHARS else "..." + name[-(MAX_NAME_CHARS - 3) :]


# A prefix window keeps its first line while the cursor moves nearby, as long as the window
# holds between these fractions of its token budget: the cached KV of the lines it shares with
# the last prompt survives the move (a window that slid one line per move would re-prefill
# everything). A window that starts afresh is as long as the budget allows.
STICKY_WINDOW = (0.75, 1.25)


def clip_prefix(tokenizer: Any, text: str, budget: int, keep_at: int | None = None) -> str:
    """A tail of ``text`` that starts at a line start: at offset ``keep_at`` (where the last
    window at this document began) if that is a line start and the tail from there holds
    ``STICKY_WINDOW`` of ``budget``, else the longest tail that fits ``budget``."""
    if keep_at is not None and 0 <= keep_at <= len(text):
        low, high = STICKY_WINDOW
        if keep_at == 0 or text[keep_at - 1] == "\n":  # only a line start is worth counting
            held = _count_tokens(tokenizer, text, keep_at, int(budget * high))
            if held is not None and held >= budget * low:
                return text[keep_at:]
    base = max(0, len(text) - budget * MAX_CHARS_PER_TOKEN)
    enc = plain_encoding(tokenizer, text[base:])
    if len(enc["input_ids"]) <= budget:
        if base == 0:
            return text
        start = base
    else:
        start = base + enc["offset_mapping"][-budget][0]
    newline = text.find("\n", start)
    if start > 0 and text[start - 1] != "\n" and newline >= 0:  # begin at the next whole line
        start = newline + 1  # (a line longer than the budget is cut inside)
    return text[start:]


def _count_tokens(tokenizer: Any, text: str, start: int, limit: int) -> int | None:
    """How many tokens ``text[start:]`` holds; None when more than ``limit``."""
    if len(text) - start > limit * MAX_CHARS_PER_TOKEN:  # more, whatever the tokens are
        return None
    count = len(plain_ids(tokenizer, text[start:]))
    return count if count <= limit else None


def clip_suffix(tokenizer: Any, text: str, budget: int) -> str:
    """The longest head of ``text`` that ends at a line end and fits ``budget`` tokens."""
    window = text[: budget * MAX_CHARS_PER_TOKEN]
    enc = plain_encoding(tokenizer, window)
    if len(enc["input_ids"]) <= budget:
        if len(window) == len(text):
            return text
        end = len(window)
    else:
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
) -> tuple[list[int], int]:
    """Token ids of the FIM prompt for ``request``, and the offset in ``request.prefix`` where
    its prefix window begins (for the next prompt at this document: ``prefix_from``). Without
    FIM tokens (a model that has none) the prompt is the prefix window alone."""

    def encode(text: str) -> list[int]:
        return plain_ids(tokenizer, text)

    def special(text: str) -> list[int]:
        return [tokenizer.convert_tokens_to_ids(text)]

    if not tokens.fim_prefix:  # a model without FIM tokens: the text before the cursor alone
        prefix = clip_prefix(tokenizer, request.prefix, prefix_tokens, request.prefix_from)
        return encode(prefix), len(request.prefix) - len(prefix)
    ids: list[int] = []
    repo_level = bool(tokens.file_sep) and (request.extra_files or request.path)
    if repo_level:
        if tokens.repo_name:
            repo = name_in_prompt(request.repo or "workspace")
            ids += special(tokens.repo_name) + encode(repo + "\n")
        left = extra_tokens
        for path, text in request.extra_files:
            shown = f"{name_in_prompt(path)}\n{text[: left * MAX_CHARS_PER_TOKEN]}"
            body = encode(shown)[:left]
            if not body:
                break
            ids += special(tokens.file_sep) + body
            left -= len(body)
        ids += special(tokens.file_sep) + encode(name_in_prompt(request.path or "untitled") + "\n")
    prefix = clip_prefix(tokenizer, request.prefix, prefix_tokens, request.prefix_from)
    suffix = clip_suffix(tokenizer, request.suffix, suffix_tokens)
    ids += special(tokens.fim_prefix) + encode(prefix)
    ids += special(tokens.fim_suffix) + encode(suffix)
    ids += special(tokens.fim_middle)
    return ids, len(request.prefix) - len(prefix)


@dataclass(frozen=True)
class Anchor:
    """A prompt built for a cursor, kept so that typing at that cursor extends it.

    While the user types at the anchored cursor, the document is ``prefix + typed + suffix``.
    Rebuilding the FIM prompt would put the typed text before ``<|fim_suffix|>`` and so change
    every token after it; instead the typed text is appended after ``<|fim_middle|>``, as the
    start of the middle the model is writing. The prompt then only grows at its end, and the KV
    cache prefills just the typed tokens.
    """

    prefix: str
    suffix: str
    ids: list[int] = field(default_factory=list)
    window_at: int | None = None  # where the prompt's prefix window begins in ``prefix``


def extend_anchor(
    tokenizer: Any, anchor: Anchor | None, prefix: str, suffix: str, max_typed: int = 64
) -> list[int] | None:
    """The anchored prompt for a cursor after typing, or None when a fresh prompt is needed
    (the suffix changed, text before the anchor changed, a newline or too much was typed)."""
    if anchor is None or suffix != anchor.suffix or not prefix.startswith(anchor.prefix):
        return None
    typed = prefix[len(anchor.prefix) :]
    if len(typed) > max_typed or "\n" in typed:
        return None
    return anchor.ids + plain_ids(tokenizer, typed)
