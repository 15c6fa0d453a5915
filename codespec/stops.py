"""Syntax-aware completion rules: when to complete, how much, where to stop, how to shape.

Text in, decisions out; no model here. ``decide_mode`` looks at the cursor and says NONE, LINE or
BLOCK. ``StopChecker.cut`` is called as tokens are accepted (through ``TextStopRule``, the
engine's stop hook) and returns the character index where the completion must end. ``shape``
cleans the final text. Rules, in the order they are checked on each complete line:

1. single-line mode: the end of the first line;
2. a line that dedents below the block the cursor is in (indentation languages, and any language
   after a blank-line gap: the completion has moved on to the next item), judged as soon as the
   line's first non-blank character comes;
3. a closing bracket that the text after the cursor already supplies (cut before its line), or
   one it does not supply (the completion closes the block it started in: stop after its line);
4. the file parses again: prefix + completion + suffix has no syntax error although prefix +
   suffix had one (the node around the cursor is complete);
5. the completion starts repeating the first non-blank line after the cursor;
6. a repetition loop: the same line three times in a row (one is kept);
7. a maximum number of lines.
"""

from __future__ import annotations

import enum
import functools
from dataclasses import dataclass
from typing import Any

from .client_stops import Checker
from .languages import GENERIC, Language, has_syntax_error, parse

MAX_REMEMBERED_PARSES = 256  # rule 4's verdicts kept per completion (see StopChecker)
CLOSERS = ")]}"
OPENERS = "([{"
QUOTES = "\"'`"


class Mode(enum.Enum):
    NONE = "none"
    LINE = "line"
    BLOCK = "block"


@dataclass(frozen=True)
class Cursor:
    """The document split at the cursor, and its language."""

    prefix: str
    suffix: str
    language: Language = GENERIC

    @property
    def line_before(self) -> str:
        return self.prefix.rsplit("\n", 1)[-1]

    @property
    def line_after(self) -> str:
        return self.suffix.split("\n", 1)[0].rstrip("\r")


def indent_of(line: str) -> int:
    return len(line.expandtabs(4)) - len(line.expandtabs(4).lstrip(" "))


def _in_comment_or_string(cursor: Cursor) -> bool:
    tree = parse(cursor.language, cursor.prefix + cursor.suffix)
    if tree is None:
        return False
    offset = len(cursor.prefix.encode("utf-8"))
    node = tree.root_node.descendant_for_byte_range(max(offset - 1, 0), offset)
    while node is not None:
        if "comment" in node.type or node.type in ("string", "string_content", "template_string"):
            return node.start_byte < offset < node.end_byte or node.type.endswith("comment")
        node = node.parent
    return False


def decide_mode(cursor: Cursor, invoked: bool = False, complete_mid_word: bool = False) -> Mode:
    """Whether and how much to complete at the cursor.

    NONE in the middle of a word (word characters on both sides of the cursor) unless
    configured or invoked; LINE inside a comment or string, or when text follows the cursor on
    its line; BLOCK on a blank line, or at the end of a line that opens a block. An explicit
    (invoked) request widens NONE to LINE and an end-of-line LINE to BLOCK.
    """
    before, after = cursor.line_before, cursor.line_after
    if _is_word_char(after[:1]) and _is_word_char(before[-1:]):
        if not (complete_mid_word or invoked):
            return Mode.NONE
        return Mode.LINE
    if after.strip() or _in_comment_or_string(cursor):  # (text after it: no parse needed)
        return Mode.LINE
    if before.strip() == "":
        return Mode.BLOCK
    if before.rstrip().endswith(cursor.language.block_openers) or before.rstrip()[-1:] in OPENERS:
        return Mode.BLOCK
    return Mode.BLOCK if invoked else Mode.LINE


def _is_word_char(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


def bracket_balance(text: str) -> list[int]:
    """Running bracket depth at the end of each line of ``text`` (strings roughly skipped)."""
    depth, quote, out = 0, "", []
    for line in text.split("\n"):
        for i, ch in enumerate(line):
            if quote:
                if ch == quote and line[i - 1 : i] != "\\":
                    quote = ""
            elif ch in QUOTES:
                quote = ch
            elif ch in OPENERS:
                depth += 1
            elif ch in CLOSERS:
                depth -= 1
        quote = "" if quote != "`" else quote  # only template strings span lines
        out.append(depth)
    return out


class StopChecker:
    """Decides where a growing completion must end (see the module docstring)."""

    def __init__(self, cursor: Cursor, mode: Mode, max_lines: int = 24) -> None:
        self.cursor = cursor
        self.mode = mode
        self.max_lines = max_lines
        before = cursor.line_before
        # The completion stays inside the block the cursor is in: on a blank line that is the
        # cursor's column; after a block opener, anything deeper than the opener's line.
        if before.strip() == "":
            self.block_indent = indent_of(before)
        else:
            self.block_indent = indent_of(before) + 1
        self.suffix_lines = [s.strip() for s in cursor.suffix.split("\n") if s.strip()]
        # Rule 4's verdicts by completion text: every call re-judges all complete lines, and a
        # parse of a large file whose syntax error lies elsewhere can take tens of milliseconds.
        self._parses: dict[str, bool] = {}
        # On a blank cursor line the completion's first line is a whole line of code.
        self.whole_first_line = before.strip() == "" and cursor.line_after.strip() == ""

    @functools.cached_property
    def doc_had_error(self) -> bool | None:
        """Whether the document had a syntax error before the completion (None: no grammar).
        Asked only by the multi-line rules: a one-line completion never parses the file."""
        return has_syntax_error(self.cursor.language, self.cursor.prefix + self.cursor.suffix)

    def cut(self, completion: str, final: bool = False) -> int | None:
        """Character index where ``completion`` must end, or None to keep generating.

        Complete lines are judged (plus the last one when ``final``); the line being
        generated only by its indentation (rule 2).
        """
        if self.mode is Mode.LINE:
            newline = completion.find("\n")
            return newline if newline >= 0 else None
        lines = completion.split("\n")
        complete = lines if final else lines[:-1]
        balance = bracket_balance(completion)
        offset = 0  # character index of the start of line i
        gap = False  # a blank line came since the last non-blank one
        for i, line in enumerate(complete):
            end = offset + len(line)
            stripped = line.strip()
            if i == 0 and stripped and self.whole_first_line and self._repeats_suffix(stripped):
                return 0  # the very first line already repeats the text after the cursor
            if i > 0 and stripped:
                if self._dedents(line, gap):
                    return offset
                if balance[i] < 0:
                    # Rule 3: a bracket opened before the cursor is being closed.
                    return offset if self.doc_had_error is False or self._suffix_closes() else end
                if self._repeats_suffix(stripped):
                    return offset
                if i >= 2 and stripped == lines[i - 1].strip() == lines[i - 2].strip():
                    return offset - len(lines[i - 1]) - 1
            if stripped and self._file_parses_with(completion[:end]):
                return end
            if i + 1 >= self.max_lines:
                return end
            if i > 0:
                gap = not stripped
            offset = end + 1
        # Rule 2 needs only a line's indentation, known at its first non-blank character: the
        # line being generated is judged now (same cut as once it is complete, a line sooner).
        last = lines[-1]
        if not final and len(lines) > 1 and last.strip() and self._dedents(last, gap):
            return offset
        return None

    # -- rules --------------------------------------------------------------------------------

    def _dedents(self, line: str, after_gap: bool) -> bool:
        indent = indent_of(line)
        if self.cursor.language.indent_blocks or self.cursor.language is GENERIC:
            if indent < self.block_indent:
                return True
        # In any language, a blank-line gap followed by a line at or left of the block's
        # indentation means the completion moved on to the next item.
        return after_gap and indent < max(self.block_indent, 1)

    def _suffix_closes(self) -> bool:
        return bool(self.suffix_lines) and self.suffix_lines[0][0] in CLOSERS

    def _repeats_suffix(self, stripped: str) -> bool:
        if not self.suffix_lines:
            return False
        first = self.suffix_lines[0]
        return stripped == first and any(c.isalnum() for c in first)

    def _file_parses_with(self, text: str) -> bool:
        if not self.doc_had_error:  # nothing to complete syntactically, or no grammar
            return False
        if text not in self._parses:
            if len(self._parses) >= MAX_REMEMBERED_PARSES:
                self._parses.clear()
            whole = self.cursor.prefix + text + self.cursor.suffix
            self._parses[text] = has_syntax_error(self.cursor.language, whole) is False
        return self._parses[text]


def shape(completion: str, cursor: Cursor, mode: Mode) -> str:
    """Clean a finished completion; never touches what the user typed.

    Trailing whitespace goes; closing brackets or quotes that already follow the cursor are not
    repeated; if the completion breaks a file that parsed before, it is cut back to the last line
    end where the file still parses, or dropped.
    """
    text = "\n".join(line.rstrip() for line in completion.split("\n")).rstrip()
    after = cursor.line_after.rstrip()
    if after and "\n" not in text:
        if text.endswith(after):
            text = text[: len(text) - len(after)]
        else:
            closers = len(after) - len(after.lstrip(CLOSERS + QUOTES + ";,"))
            for k in range(closers, 0, -1):
                if text.endswith(after[:k]):
                    text = text[: len(text) - k]
                    break
    lang = cursor.language
    if text and has_syntax_error(lang, cursor.prefix + cursor.suffix) is False:
        candidate = text
        while candidate and has_syntax_error(lang, cursor.prefix + candidate + cursor.suffix):
            cut = candidate.rfind("\n")
            candidate = candidate[:cut].rstrip() if cut > 0 else ""
        text = candidate
    return text


def drop_partial_line(text: str, mode: Mode, stop_reason: str) -> str:
    """A multi-line completion cut by the token limit (or stopped: a request that yielded the
    worker to another session) ends at its last complete line."""
    if mode is Mode.BLOCK and stop_reason in ("max_tokens", "cancelled") and "\n" in text:
        return text[: text.rfind("\n")]
    return text


class TextStopRule:
    """The engine's stop hook over text: decode, ask the checker, map the cut back to tokens.

    The engine also asks it about tokens that were only proposed (how far a proposal can
    matter, ``loop._Output.horizon``), so a call changes nothing the caller reads: the text
    each cut leaves is remembered by the tokens it keeps, and read back for the tokens that
    generation actually kept.
    """

    def __init__(self, tokenizer: Any, checker: Checker) -> None:
        self.tokenizer = tokenizer
        self.checker = checker
        self._cut_texts: dict[tuple[int, ...], str] = {}  # kept tokens -> text cut at the stop

    def __call__(self, tokens: list[int]) -> int | None:
        text = self.tokenizer.decode(tokens)
        cut = self.checker.cut(text)
        if cut is None:
            return None
        # Keep the fewest tokens whose text covers the cut (the last one may run past it).
        lo, hi = 0, len(tokens)
        while lo < hi:
            mid = (lo + hi) // 2
            if len(self.tokenizer.decode(tokens[:mid])) >= cut:
                hi = mid
            else:
                lo = mid + 1
        self._cut_texts[tuple(tokens[:lo])] = text[:cut]
        return lo

    def finish(self, tokens: list[int], stopped_here: bool) -> str:
        """The completion text of the generated ``tokens``: as this rule cut them when it
        stopped generation (``stopped_here``), else decoded and judged as final."""
        if stopped_here and tuple(tokens) in self._cut_texts:
            return self._cut_texts[tuple(tokens)]  # written last by the call that stopped it
        text = self.tokenizer.decode(tokens)
        cut = self.checker.cut(text, final=True)
        return text if cut is None else text[:cut]
