"""N-gram prompt lookup: propose what followed earlier occurrences of the current ending.

The context is everything the model sees (extra files, prefix, suffix) plus the tokens generated
so far. The last ``n`` tokens are searched for, longest ``n`` first (``max_ngram`` down to
``min_ngram``); among matches of one length the most recent wins (code near the cursor is the
best predictor), and a few distinct continuations are returned so that a token tree can verify
them together. The span length adapts like transformers' heuristic: +2 after a fully accepted
span, -1 otherwise. No model runs here, so a proposal costs microseconds.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .tree import Candidate


class NgramProposer:
    """Prompt-lookup proposer (``propose`` / ``update``)."""

    name = "ngram"

    def __init__(
        self,
        max_ngram: int = 6,
        min_ngram: int = 1,
        span: int = 10,
        max_span: int = 32,
        branches: int = 5,
    ) -> None:
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self.span = span
        self.max_span = max_span
        self.branches = branches

    def propose(self, context: list[int], budget: int) -> list[Candidate]:
        """Up to ``branches`` distinct continuations, best first, each at most ``span`` long."""
        if budget <= 0 or len(context) < self.min_ngram + 1:
            return []
        limit = min(self.span, budget)
        ctx = np.asarray(context, dtype=np.int64)
        found: list[Candidate] = []
        seen: set[tuple[int, ...]] = set()
        for n in range(min(self.max_ngram, len(ctx) - 1), self.min_ngram - 1, -1):
            # Windows over ctx[:-1] so that every match has at least one token after it and
            # the trailing occurrence (the pattern itself) is never matched.
            windows = sliding_window_view(ctx[:-1], n)  # (L - n, n)
            hits = np.flatnonzero((windows == ctx[-n:]).all(axis=1))
            for start in hits[::-1]:  # most recent first
                span = tuple(int(t) for t in ctx[start + n : start + n + limit])
                if not span or any(s[: len(span)] == span for s in seen):
                    continue
                seen.add(span)
                found.append(Candidate(list(span), self.name, evidence=n))
                if len(found) >= self.branches:
                    return found
            if found:  # longer matches are better evidence than any shorter one
                return found
        return found

    def update(self, proposed: int, accepted: int) -> None:
        """Adapt the span: grow after a fully accepted span, shrink after a rejection."""
        if proposed <= 0:
            return
        if accepted >= proposed:
            self.span = min(self.span + 2, self.max_span)
        else:
            self.span = max(self.span - 1, 2)
