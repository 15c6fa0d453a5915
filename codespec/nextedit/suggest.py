"""From a document, its cursor and its recent edits to the next edits: the prompt
(``prompt.py``), the updated window written by the engine with the current window as its
draft (``engine/rewrite.py``: speculative edits), confined to the window, and the edits worth
showing (``edits.py``).

The output is the target's own tokens; speculation only makes it fast. Nothing past the window
reaches the user: generation stops at the next file separator, at a code fence, once the
window's last line has been written again where it belongs, or at a line budget (``WindowEnd``).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..engine import GenerationParams, GenerationStats, StopSignal
from ..generator import Generator
from ..stops import TextStopRule
from ..tokenizer import Tokenizer
from . import edits, prompt
from .history import EditHistory

EXTRA_LINES = 8  # lines an updated window may have beyond the current one's
EXTRA_TOKENS = 64  # tokens likewise (the token limit of the rewrite)
DROPPED_LINES = 3  # lines before its end an updated window may end, having deleted some
HEAD = "\n"  # what the model writes before the window: the ``updated/{path}`` header's end


@dataclass(frozen=True)
class NextEdit:
    """What a next-edit request found: the edits worth showing (none: no suggestion) and the
    one edit that shows them (``edits.hunk``) with the model's confidence in it, the window
    they are in, the updated window the model wrote, and what writing it took."""

    edits: list[edits.LineEdit]
    hunk: edits.LineEdit | None
    confidence: float
    window: prompt.Window
    updated: str
    prompt_tokens: int
    stats: GenerationStats
    tokens: list[int]  # what the model wrote

    def shown(self, least_confidence: float) -> edits.LineEdit | None:
        """The edit to show where the model must be this sure of it (None: no suggestion)."""
        return self.hunk if self.confidence >= least_confidence else None


class WindowEnd:
    """Where an updated window ends in the model's text (a ``stops.Checker``): the text is the
    header's line break (``HEAD``), then the window."""

    def __init__(self, window: str, separator: str) -> None:
        lines = window.splitlines()
        self.lines = len(lines)
        self.last = next((line for line in reversed(lines) if line.strip()), None)
        self.separator = separator

    def cut(self, completion: str, final: bool = False) -> int | None:
        if completion.startswith(HEAD):
            at = self._cut(completion[len(HEAD) :])
            return None if at is None else at + len(HEAD)
        return self._cut(completion)

    def _cut(self, text: str) -> int | None:
        ends = [at for at in (text.find(self.separator), _fence(text)) if at >= 0]
        at = min(ends, default=len(text))
        head = text[:at]
        offset = 0
        for number, line in enumerate(head.split("\n")):
            complete = offset + len(line) < len(head)  # (a line break after it)
            if not complete:
                break
            offset += len(line) + 1
            if number + 1 >= self.lines + EXTRA_LINES:
                return offset  # the line budget
            if line == self.last and number + 1 >= self.lines - DROPPED_LINES:
                return offset  # the window's last line written again: its end
        return at if at < len(text) else None


def _fence(text: str) -> int:
    """Where a code fence starts a line (-1: none)."""
    if text.startswith("```"):
        return 0
    at = text.find("\n```")
    return at + 1 if at >= 0 else -1


def suggest(
    generator: Generator,
    tokenizer: Tokenizer,
    separator: str,
    path: str,
    text: str,
    cursor_line: int,
    history: EditHistory,
    related: list[tuple[str, str]] | None = None,
    stop: StopSignal | None = None,
    speculate: bool = True,
) -> NextEdit:
    """The next edits in the window around ``cursor_line`` of ``text`` (the document now);
    ``speculate=False`` writes the window one token a pass (what speculation is measured
    against)."""
    built = prompt.build(path, text, cursor_line, history, related)
    if not built.window.text.strip():  # (nothing to rewrite: blank, or lines too long)
        return NextEdit([], None, 0.0, built.window, "", 0, GenerationStats(), [])
    ids = prompt.prompt_ids(tokenizer, separator, built.segments)
    # the window as the model's output begins: the header's line break, then the window
    window_ids = tokenizer(HEAD + built.window.text, split_special_tokens=True)["input_ids"]
    rule = TextStopRule(tokenizer, WindowEnd(built.window.text, separator))
    params = GenerationParams(
        max_tokens=len(window_ids) + EXTRA_TOKENS,
        context="next-edit",
        speculate=speculate,
        use_draft=False,
        rewrite_of=tuple(window_ids),
        keep_probabilities=True,
    )
    generation = generator.generate(ids, params, stop, rule)
    tokens = generation.run()
    stopped = generation.stats.stop_reason == "stop_rule"
    written = rule.finish(tokens, stopped)
    head = len(HEAD) if written.startswith(HEAD) else 0
    last = history.edits[-1] if history.edits else None
    updated = edits.completed(built.window.text, _ending_like(written[head:], built.window.text))
    found = edits.filtered(built.window.text, updated, last)
    hunk = edits.hunk(built.window.text, found)
    sure = 0.0
    if hunk is not None:
        spans = [(a - head, b - head) for a, b in edits.token_spans(tokenizer.decode, tokens)]
        sure = min(edits.confidence(updated, e, spans, generation.stats.chosen_p) for e in found)
    return NextEdit(found, hunk, sure, built.window, updated, len(ids), generation.stats, tokens)


def _ending_like(updated: str, window: str) -> str:
    """``updated`` with the window's final line break (the model's text stops before or after
    it; a missing one is no edit)."""
    if window.endswith("\n") and not updated.endswith("\n"):
        return updated + "\n"
    return updated
