"""The stop conditions a client states itself (llama-server's ``stop``, ``n_indent`` and
``t_max_predict_ms``; OpenAI's ``stop``), judged inside the decode loop beside codespec's own
stop rules.

Each checker answers ``cut(text, final)`` as ``stops.StopChecker`` does: the character index
where a growing completion must end, or None to go on; ``EarliestCut`` asks several and keeps
the first cut. ``TextStopRule`` maps a cut back to tokens, so the engine stops at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

MAX_REASONS = 64  # recent cuts remembered (the engine asks about proposals too)


class Checker(Protocol):
    def cut(self, completion: str, final: bool = False) -> int | None: ...


@dataclass
class ClientStops:
    """What the client asked for:

    * ``words``: the completion ends before the first of these strings (it is left out);
    * ``min_indent``: llama-server's ``n_indent``: a later line indented less than this (spaces
      and tabs counted alike) ends the completion before that line;
    * ``predict_s``: llama-server's ``t_max_predict_ms``: once this long has passed since
      generation began (the first call) and a line has ended, the completion ends at its last
      line end.
    """

    words: tuple[str, ...] = ()
    min_indent: int = 0
    predict_s: float = 0.0
    clock: Callable[[], float] = time.perf_counter
    started: float | None = field(default=None, init=False)
    # why each recent cut was made, by the text it left: ("word", the word) or ("limit", "")
    _reasons: dict[str, tuple[str, str]] = field(default_factory=dict, init=False, repr=False)

    def __bool__(self) -> bool:
        return bool(self.words or self.min_indent > 0 or self.predict_s > 0)

    def cut(self, completion: str, final: bool = False) -> int | None:
        if self.started is None:
            self.started = self.clock()
        cuts: list[tuple[int, str, str]] = []
        if (found := self._word(completion)) is not None:
            cuts.append((found[0], "word", found[1]))
        if (indent := self._indent(completion)) is not None:
            cuts.append((indent, "limit", ""))
        # (a finished text is judged without the clock: it ended in time or was cut already)
        if not final and self.predict_s > 0 and self.clock() - self.started > self.predict_s:
            line_end = completion.rfind("\n")
            if line_end >= 0:
                cuts.append((line_end, "limit", ""))
        if not cuts:
            return None
        at, kind, word = min(cuts)
        self._reasons[completion[:at]] = (kind, word)
        while len(self._reasons) > MAX_REASONS:
            del self._reasons[next(iter(self._reasons))]
        return at

    def reason(self, text: str) -> tuple[str, str] | None:
        """Why a completion that ended as ``text`` was cut here: ("word", the stop word) or
        ("limit", "") for the indent or the time limit; None if no cut of these left it."""
        return self._reasons.get(text)

    def _word(self, completion: str) -> tuple[int, str] | None:
        found = [(i, w) for w in self.words if (i := completion.find(w)) >= 0]
        return min(found) if found else None

    def _indent(self, completion: str) -> int | None:
        if self.min_indent <= 0:
            return None
        offset = completion.find("\n")
        while offset >= 0:
            line_start = offset + 1
            end = completion.find("\n", line_start)
            line = completion[line_start:] if end < 0 else completion[line_start:end]
            body = line.lstrip(" \t")
            # judged once the line shows its first character (its indent is then known)
            if body and len(line) - len(body) < self.min_indent:
                return offset
            offset = end
        return None

    def held_back(self, text: str) -> int:
        """How many characters at the end of ``text`` may still become a stop word (a stream
        holds them back until it knows)."""
        longest = 0
        for word in self.words:
            for k in range(min(len(word) - 1, len(text)), longest, -1):
                if text.endswith(word[:k]):
                    longest = k
                    break
        return longest


@dataclass
class EarliestCut:
    """Several checkers as one: the earliest cut any of them makes."""

    checkers: Sequence[Checker]

    def cut(self, completion: str, final: bool = False) -> int | None:
        cuts = [c for checker in self.checkers if (c := checker.cut(completion, final)) is not None]
        return min(cuts) if cuts else None
