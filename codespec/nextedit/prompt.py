"""The next-edit prompt in Sweep's open format (issue 53, item 2), built on Qwen2.5-Coder's own
repository tokens: recent edits as ``original:``/``updated:`` blocks, then the window around the
cursor as it was before the session's edits, as it is now, and the header under which the model
writes the updated window::

    <|file_sep|>{related path}\\n{its text}          (workspace definitions, optional)
    <|file_sep|>{path}.diff\\noriginal:\\n{old lines}\\nupdated:\\n{new lines}  (recent edits)
    <|file_sep|>original/{path}\\n{the window before the session's edits}
    <|file_sep|>current/{path}\\n{the window now}
    <|file_sep|>updated/{path}

The prompt ends before the header's line break: the model writes it, then the window. Ending
the prompt with it would split what the tokenizer merges: a window that starts with a blank
line starts with one ``\\n\\n`` token after the header in the ``current/`` block, and a
lone ``\\n`` token before it is text the model has never seen (it ends the file at once).

The prompt is a list of segments, the separator apart from the text: text is tokenized with
special tokens read as plain text, so a file that spells ``<|file_sep|>`` cannot forge a
section (``prompt_ids``).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from ..tokenizer import Tokenizer
from .history import EditHistory

WINDOW_RADIUS = 10  # lines above and below the cursor's: Sweep's 21-line window
MAX_DIFF_BLOCKS = 3  # recent edits shown
MAX_DIFF_LINES = 40  # lines of old and new text in all of them together
SEPARATOR = None  # a segment that is the file separator token
# lines times lines past which a changed part of a document is not diffed line by line
MAX_DIFF_WORK = 200_000
# characters a window may hold (Sweep's 21 lines of code are a fraction of it), and the recent
# edits together: what bounds the prompt's prefill and the rewrite's length
MAX_WINDOW_CHARS = 6_000
MAX_DIFF_CHARS = 3_000


@dataclass(frozen=True)
class Window:
    """Lines ``[first, end)`` of the current text, and the text of those lines (each line
    with its line break, the last one's too when the text has it)."""

    first: int
    end: int
    text: str


@dataclass(frozen=True)
class NextEditPrompt:
    segments: list[str | None]  # text, or None for the separator token
    window: Window  # what the model rewrites


def window_around(
    text: str, line: int, radius: int = WINDOW_RADIUS, max_chars: int = MAX_WINDOW_CHARS
) -> Window:
    """The lines within ``radius`` of ``line`` (clamped to the text), fewer where they would
    hold more than ``max_chars`` (long lines: minified code, data); an empty window where the
    line alone does (nothing a model could rewrite in time)."""
    lines = text.splitlines(keepends=True) or [""]
    line = max(0, min(line, len(lines) - 1))
    for r in range(radius, -1, -1):
        first, end = max(0, line - r), min(len(lines), line + r + 1)
        chunk = "".join(lines[first:end])
        if len(chunk) <= max_chars:
            return Window(first, end, chunk)
    return Window(line, line, "")


def original_window(original: str, current: str, window: Window) -> str:
    """The lines of ``original`` that became ``window``'s lines of ``current`` (``difflib`` on
    lines): a line both texts keep maps to itself; a window edge inside a changed part maps to
    that part's edge, so the original window holds the whole change."""
    old, new = original.splitlines(keepends=True), current.splitlines(keepends=True)
    blocks = line_blocks(old, new)

    def block_of(line: int) -> tuple[str, int, int, int]:
        """(tag, i1, i2, j1) of the block that holds line ``line`` of the current text."""
        return next((t, i1, i2, j1) for t, i1, i2, j1, j2 in blocks if j1 <= line < j2)

    def first_of(line: int) -> int:
        if line >= len(new):
            return len(old)
        tag, i1, _, j1 = block_of(line)
        return i1 + line - j1 if tag == "equal" else i1

    def end_of(line: int) -> int:  # (the window's last line is ``line - 1``)
        if line <= 0:
            return 0
        tag, i1, i2, j1 = block_of(line - 1)
        return i1 + line - j1 if tag == "equal" else i2

    return "".join(old[first_of(window.first) : end_of(window.end)])


def line_blocks(old: list[str], new: list[str]) -> list[tuple[str, int, int, int, int]]:
    """``difflib``'s opcodes from ``old`` lines to ``new`` ones, at a cost bounded whatever the
    texts: the lines both begin and end with are matched first (a session's edits are a few
    places in a long file); between them, where comparing every line with every other would
    cost more than ``MAX_DIFF_WORK`` (difflib is quadratic in lines that repeat: braces,
    blank lines), the part is one change."""
    start = 0
    while start < min(len(old), len(new)) and old[start] == new[start]:
        start += 1
    tail = 0
    while tail < min(len(old), len(new)) - start and old[-1 - tail] == new[-1 - tail]:
        tail += 1
    old_end, new_end = len(old) - tail, len(new) - tail
    middle: list[tuple[str, int, int, int, int]] = []
    if (old_end - start) * (new_end - start) > MAX_DIFF_WORK:
        middle = [("replace", start, old_end, start, new_end)]
    elif old_end > start or new_end > start:
        matcher = difflib.SequenceMatcher(None, old[start:old_end], new[start:new_end], False)
        middle = [
            (tag, i1 + start, i2 + start, j1 + start, j2 + start)
            for tag, i1, i2, j1, j2 in matcher.get_opcodes()
        ]
    head = [("equal", 0, start, 0, start)] if start else []
    end = [("equal", old_end, len(old), new_end, len(new))] if tail else []
    return head + middle + end


def build(
    path: str,
    text: str,
    cursor_line: int,
    history: EditHistory,
    related: list[tuple[str, str]] | None = None,
    radius: int = WINDOW_RADIUS,
) -> NextEditPrompt:
    """The prompt for the window around ``cursor_line`` of ``text`` (the document now)."""
    window = window_around(text, cursor_line, radius)
    segments: list[str | None] = []
    for related_path, content in related or []:
        segments += [SEPARATOR, f"{related_path}\n{_ending(content)}"]
    for old, new in _diff_blocks(history):
        segments += [SEPARATOR, f"{path}.diff\noriginal:\n{old}updated:\n{new}"]
    before = (
        window.text if history.original is None else original_window(history.original, text, window)
    )
    if len(before) > MAX_WINDOW_CHARS:  # (lines deleted there by the thousand: not shown)
        before = window.text
    segments += [SEPARATOR, f"original/{path}\n{_ending(before)}"]
    segments += [SEPARATOR, f"current/{path}\n{_ending(window.text)}"]
    segments += [SEPARATOR, f"updated/{path}"]
    return NextEditPrompt(segments, window)


def _diff_blocks(history: EditHistory) -> list[tuple[str, str]]:
    """The last edits' old and new lines, newest kept first when the line budget runs out,
    shown oldest first."""
    blocks: list[tuple[str, str]] = []
    budget, chars = MAX_DIFF_LINES, MAX_DIFF_CHARS
    for edit in reversed(history.recent(MAX_DIFF_BLOCKS)):
        old, new = _ending(edit.old), _ending(edit.new)
        lines = old.count("\n") + new.count("\n")
        if lines > budget or len(old) + len(new) > chars:
            break
        budget, chars = budget - lines, chars - len(old) - len(new)
        blocks.append((old, new))
    return blocks[::-1]


def _ending(text: str) -> str:
    """``text`` ending with one line break (a section's text never runs into the next)."""
    return text if text.endswith("\n") or not text else text + "\n"


def prompt_ids(tokenizer: Tokenizer, separator: str, segments: list[str | None]) -> list[int]:
    """Token ids of a prompt: the separator token for each None, each text tokenized with
    special tokens spelled in it read as plain text."""
    separator_id = tokenizer.convert_tokens_to_ids(separator)
    if separator_id is None:
        raise ValueError(f"the tokenizer has no token {separator!r}")
    ids: list[int] = []
    for segment in segments:
        if segment is None:
            ids.append(separator_id)
        elif segment:
            ids += tokenizer(segment, split_special_tokens=True)["input_ids"]
    return ids
