"""Acceptance: how likely proposed tokens are to be kept, and what a chain is worth.

The policy (``policy.py``) weighs what passes cost (``costs.py``) against what they buy, which
this module says. A chain whose i-th
token is kept with probability ``a_i`` given the ones before it were yields, bonus included,
``E(k) = 1 + a_1 + a_1 a_2 + ... + a_1 ... a_k`` tokens when its first k are verified. The rates
are learned online (``Acceptance``, decayed counts) from priors measured offline: n-gram spans by
match length and by how the other matches voted on their first token (``ngram.py``).
"""

from __future__ import annotations

from collections.abc import Iterator

from .ngram import SINGLE, SPLIT, UNANIMOUS
from .proposers import LOOKUP_SOURCES, NGRAM

EVIDENCE_BUCKETS = (1, 2, 3, 5, 8)  # n-gram match lengths: 1, 2, 3-4, 5-7, 8+
NGRAM_PRIOR = 0.35  # n-gram acceptance before any is measured, for a span of unknown support
# Before any is measured in a context: how often the first token of an n-gram span is kept, by
# match-length bucket and the matches' vote (``ngram.py``), and each later token given the one
# before it was. Measured offline on greedy completions of bench holes that the benchmark tables
# do not use (``benchmarks/ngram_offers.py`` reproduces them), rounded.
NGRAM_FIRST_PRIOR = {
    (1, SINGLE): 0.2,
    (1, SPLIT): 0.25,
    (1, UNANIMOUS): 0.8,
    (2, SINGLE): 0.6,
    (2, SPLIT): 0.25,
    (2, UNANIMOUS): 0.7,
    (3, SINGLE): 0.7,
    (3, SPLIT): 0.4,
    (3, UNANIMOUS): 0.8,
    (5, SINGLE): 0.9,
    (5, SPLIT): 0.5,
    (5, UNANIMOUS): 0.95,
}
NGRAM_THEN_PRIOR = {1: 0.6, 2: 0.75, 3: 0.8, 5: 0.9, 8: 0.9}
REQUEST_WEIGHT = 3.0  # the long-run rate counts as this many observations of this request


def expectations(rates: list[float]) -> Iterator[float]:
    """E(1), E(2), ...: expected tokens per pass verifying the first k tokens of a chain whose
    i-th token is kept with probability ``rates[i]`` given the ones before it were, bonus token
    included: E(k) = 1 + sum over i <= k of P(the first i kept)."""
    expected, kept = 1.0, 1.0
    for rate in rates:
        kept *= min(max(rate, 0.0), 1.0)
        expected += kept
        yield expected


def expected_tokens(rates: list[float]) -> float:
    """E of verifying the whole chain (1.0 for none: E only grows with k)."""
    return max(expectations(rates), default=1.0)


def kept_moments(rates: list[float]) -> tuple[float, float]:
    """Mean and variance of how many tokens of a verified chain are kept (bonus not counted),
    its i-th token kept with probability ``rates[i]`` given the ones before it were. With
    ``s_i = P(K >= i) = a_1 ... a_i``: ``E[K] = sum s_i`` and ``E[K^2] = sum (2i - 1) s_i``."""
    mean = square = 0.0
    kept = 1.0
    for i, rate in enumerate(rates, start=1):
        kept *= min(max(rate, 0.0), 1.0)
        mean += kept
        square += (2 * i - 1) * kept
    return mean, square - mean * mean


def span_rates(first: float, then: float, n: int) -> list[float]:
    """Per-token rates of an ``n``-token n-gram span: ``first``, then ``then`` for the rest."""
    return [first] + [then] * (n - 1) if n > 0 else []


def evidence_bucket(evidence: int) -> int:
    return max((b for b in EVIDENCE_BUCKETS if evidence >= b), default=EVIDENCE_BUCKETS[0])


class Acceptance:
    """Per-token acceptance rate a = accepted / (accepted + rejections), decayed.

    A chain of ``proposed`` tokens of which the first ``accepted`` were kept is ``accepted``
    successes and (if it broke off) one failure: the maximum-likelihood ``a`` of E(a, k)."""

    def __init__(self, prior: float, weight: float = 4.0, decay: float = 0.97) -> None:
        self.accepted = prior * weight
        self.rejected = (1 - prior) * weight
        self.decay = decay

    def add(self, proposed: int, accepted: int) -> None:
        if proposed <= 0:
            return
        self.accepted = self.accepted * self.decay + accepted
        self.rejected = self.rejected * self.decay + (1 if accepted < proposed else 0)

    @property
    def rate(self) -> float:
        return self.accepted / max(self.accepted + self.rejected, 1e-9)


class SpanAcceptance:
    """Acceptance of the n-gram spans of one kind: of the first token, and of each later token
    given that the one before it was kept."""

    def __init__(self, first: float, then: float, weight: float = 4.0, decay: float = 0.97):
        self.first = Acceptance(first, weight, decay)
        self.then = Acceptance(then, weight, decay)

    @classmethod
    def tally(cls) -> SpanAcceptance:
        """Plain counts of kept and missed tokens: no prior, no decay (one request's record)."""
        return cls(0.0, 0.0, weight=0.0, decay=1.0)

    def add(self, proposed: int, accepted: int) -> None:
        if proposed <= 0:
            return
        self.first.add(1, min(accepted, 1))
        if accepted >= 1:
            self.then.add(proposed - 1, accepted - 1)


def blend(record: Acceptance, long_run: float) -> float:
    """The long-run rate updated by a request's own counts (``SpanAcceptance.tally``)."""
    kept, missed = record.accepted, record.rejected
    return (kept + REQUEST_WEIGHT * long_run) / (kept + missed + REQUEST_WEIGHT)


class AcceptanceBook:
    """What proposers' tokens were kept: lookup spans (prompt lookup ``"ngram"``, corpus lookup
    ``"workspace"``) by (request context, match length, vote), this request's own record per
    lookup source, and the draft's tokens."""

    def __init__(self, draft_prior: float = 0.6) -> None:
        # span acceptance per source, by (context, evidence bucket, support), from the priors
        self.spans: dict[str, dict[tuple[str, int, str], SpanAcceptance]] = {
            source: {} for source in LOOKUP_SOURCES
        }
        self.context = ""  # the current request's (``begin_request``)
        self.request: dict[str, SpanAcceptance] = {}  # what this request's spans did, by source
        self.draft = Acceptance(prior=draft_prior)

    def begin_request(self, context: str = "") -> None:
        """A new request; ``context`` keys what span acceptance it learns and uses (what
        kind of completion it is, e.g. ``"line"``)."""
        self.context = context
        self.request = {source: SpanAcceptance.tally() for source in LOOKUP_SOURCES}

    def _kind(self, source: str, evidence: int, support: str) -> SpanAcceptance:
        length = evidence_bucket(evidence)
        key = (self.context, length, support)
        kinds = self.spans[source]
        if key not in kinds:
            # The corpus starts from prompt lookup's priors: it is the same lookup over other
            # text, and its own record replaces them within a few spans.
            first = NGRAM_FIRST_PRIOR.get((min(length, 5), support), NGRAM_PRIOR)
            then = NGRAM_THEN_PRIOR[length] if support else NGRAM_PRIOR
            kinds[key] = SpanAcceptance(first, then)
        return kinds[key]

    def observe_span(
        self, evidence: int, proposed: int, accepted: int, support: str = "", source: str = NGRAM
    ) -> None:
        """A lookup span backed by a match of ``evidence`` tokens whose matches voted
        ``support`` (``ngram.py``; "" for unknown): ``accepted`` of its first ``proposed``
        tokens kept."""
        self._kind(source, evidence, support).add(proposed, accepted)
        self.request.setdefault(source, SpanAcceptance.tally()).add(proposed, accepted)

    def span_rates(
        self, evidence: int, support: str = "", source: str = NGRAM
    ) -> tuple[float, float]:
        """Acceptance of such a span's first token, and of each later one given the one before
        it was kept: the long-run rates for such spans, updated by this request's record."""
        kind = self._kind(source, evidence, support)
        record = self.request.setdefault(source, SpanAcceptance.tally())
        return blend(record.first, kind.first.rate), blend(record.then, kind.then.rate)
