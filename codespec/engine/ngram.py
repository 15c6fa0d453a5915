"""N-gram prompt lookup: propose what followed earlier occurrences of the current ending.

The context is everything the model sees (extra files, prefix, suffix) plus the tokens generated
so far. The last ``n`` tokens are searched for, longest ``n`` first (``max_ngram`` down to
``min_ngram``); among matches of one length the most recent wins (code near the cursor is the
best predictor), and a few distinct continuations are returned so that a token tree can verify
them together. The span length adapts like transformers' heuristic: +2 after a fully accepted
span, -1 otherwise. No model runs here, so a proposal costs microseconds.

Each span also says how the other occurrences of its match vote on its first token
(``support``): ``"unanimous"`` (two or more matches, all followed by that token), ``"single"``
(the only match) or ``"split"`` (some matches go on otherwise). With the match length it
predicts whether the first token is kept: a unanimous vote after a one-token match is kept far
more often than a split one, and long matches are kept most often of all (``policy.py``'s
priors; ``benchmarks/ngram_offers.py`` measures them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .proposers import NGRAM, Kind, Proposals, Sampling
from .tree import Candidate

if TYPE_CHECKING:
    from .request import GenerationParams


class NgramProposer:
    """Prompt-lookup proposer (``proposers.Proposer``): free, no model runs."""

    name = NGRAM
    kind = Kind.LOOKUP

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

    def begin(self, params: GenerationParams) -> bool:
        return params.use_ngram

    def context(
        self, prompt: list[int], generated: list[int], params: GenerationParams
    ) -> list[int]:
        """The whole prompt and what was generated after it."""
        return prompt + generated

    def propose(
        self, context: list[int], budget: int, sampling: Sampling | None = None
    ) -> Proposals:
        """Up to ``branches`` distinct continuations, best first, each at most ``span`` long."""
        return Proposals(self.lookup(context, budget))

    def lag(self, context: list[int]) -> int:
        return 0  # it reads the context as it is

    def lookup(self, context: list[int], budget: int) -> list[Candidate]:
        """The continuations ``propose`` offers."""
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
            following = ctx[hits + n]  # the token after each match
            for start in hits[::-1]:  # most recent first
                span = tuple(int(t) for t in ctx[start + n : start + n + limit])
                if not span or any(s[: len(span)] == span for s in seen):
                    continue
                seen.add(span)
                support = vote(following, span[0])
                found.append(Candidate(list(span), self.name, evidence=n, support=support))
                if len(found) >= self.branches:
                    return found
            if found:  # longer matches are better evidence than any shorter one
                return found
        return found

    def observe(self, proposed: int, accepted: int) -> None:
        self.span = adapted_span(self.span, self.max_span, proposed, accepted)


def adapted_span(span: int, max_span: int, proposed: int, accepted: int) -> int:
    """A lookup proposer's next span: longer after a fully kept span, shorter after a
    rejection (a run of repeated text tends to go on, a broken one to stay broken)."""
    if proposed <= 0:
        return span
    return min(span + 2, max_span) if accepted >= proposed else max(span - 1, 2)


UNANIMOUS, SINGLE, SPLIT = "unanimous", "single", "split"


def vote(following: np.ndarray, first: int) -> str:
    """How the matches vote on a span's first token, given the token after each match."""
    if len(following) == 1:
        return SINGLE
    return UNANIMOUS if bool((following == first).all()) else SPLIT
