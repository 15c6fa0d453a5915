"""Speculative edits: while the model rewrites a text it was shown (a next edit's window), that
text itself is the draft (issue 53, item 3).

A rewritten window is almost all a copy of the current one: a rename changes a few tokens of a
line and copies the rest. So the proposer's candidate is the *source* (the current window's
token ids, ``GenerationParams.rewrite_of``) from the point the output has reached: the
output's last tokens are found in the source, nearest to where the last alignment predicts
them, and what follows them there is proposed, long. After the model diverges (the edit
itself), no suffix of the output matches until it copies again; the next match re-aligns it.

It is a lookup like prompt lookup (``ngram.py``): free, its spans weighed by the policy with
their match length as evidence, its acceptance learned per source (``acceptance.py``). On a
CPU a long chain that is almost always kept is when a wide pass pays most.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .ngram import SINGLE, adapted_span
from .proposers import REWRITE, Kind, Proposals, Sampling
from .tree import Candidate

if TYPE_CHECKING:
    from .request import GenerationParams

# the evidence of the span offered before any output: the output begins where the source does
START_EVIDENCE = 8


class RewriteProposer:
    """The source aligned with the output so far (``proposers.Proposer``)."""

    name = REWRITE
    kind = Kind.LOOKUP

    def __init__(self, span: int = 16, max_span: int = 64, max_ngram: int = 8, min_ngram: int = 2):
        self.span = self.start_span = span
        self.max_span = max_span
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self.source = np.zeros(0, dtype=np.int64)
        self.aligned = (0, 0)  # (output length, source position) where they last lined up

    def begin(self, params: GenerationParams) -> bool:
        self.source = np.asarray(params.rewrite_of, dtype=np.int64)
        self.aligned, self.span = (0, 0), self.start_span
        return len(self.source) > 0

    def context(
        self, prompt: list[int], generated: list[int], params: GenerationParams
    ) -> list[int]:
        """The output so far: it is aligned with the source, not with the prompt."""
        return generated

    def lag(self, context: list[int]) -> int:
        return 0

    def propose(
        self, context: list[int], budget: int, sampling: Sampling | None = None
    ) -> Proposals:
        """The source after the output's last tokens, where they align (none: no candidate)."""
        limit = min(self.span, budget)
        if limit <= 0:
            return Proposals()
        found = self.align(context)
        if found is None:
            return Proposals()
        at, evidence = found
        span = [int(t) for t in self.source[at : at + limit]]
        if not span:
            return Proposals()
        return Proposals([Candidate(span, self.name, evidence=evidence, support=SINGLE)])

    def align(self, output: list[int]) -> tuple[int, int] | None:
        """(the source position the output continues at, the match length behind it), the
        output's last token where the last alignment predicts it (still copying), else the
        longest match of its last tokens and, among that match's hits, the one nearest to the
        prediction; None where no suffix of two or more tokens is in the source (the output is
        writing new text)."""
        if not output:
            return 0, START_EVIDENCE
        tail = np.asarray(output[-self.max_ngram :], dtype=np.int64)
        last_len, last_at = self.aligned
        expected = last_at + len(output) - last_len
        if 0 < expected <= len(self.source) and self.source[expected - 1] == tail[-1]:
            # still copying where the last alignment says: one token is evidence enough
            n = 1
            while n < min(len(tail), expected) and self.source[expected - 1 - n] == tail[-1 - n]:
                n += 1
            self.aligned = (len(output), expected)
            return expected, n
        for n in range(min(len(tail), self.max_ngram), self.min_ngram - 1, -1):
            if n > len(self.source):
                continue
            windows = sliding_window_view(self.source, n)
            ends = np.flatnonzero((windows == tail[-n:]).all(axis=1)) + n
            if len(ends):
                at = int(ends[np.argmin(np.abs(ends - expected))])
                self.aligned = (len(output), at)
                return at, n
        return None

    def observe(self, proposed: int, accepted: int) -> None:
        self.span = adapted_span(self.span, self.max_span, proposed, accepted)
