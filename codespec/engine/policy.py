"""Adaptive speculation policy: measure costs and acceptance online, verify what pays.

Per target pass we choose how many proposed tokens to verify and whether to run the draft.
The maths (Leviathan et al., "Fast Inference from Transformers via Speculative Decoding"): if
each proposed token of a chain is accepted with probability ``a`` (given that the ones before it
were), verifying the first ``k`` tokens of the chain yields, bonus token included, on average::

    E(a, k) = 1 + a + a^2 + ... + a^k  =  (1 - a^(k+1)) / (1 - a)

tokens per target pass, and a pass of width ``w = 1 + k`` (the pending token plus the chain)
costs ``T(w)`` seconds. So the decode loop verifies the ``k`` that maximises tokens per second::

    k* = argmax_k  E(a, k) / T(1 + k)            (k = 0 is plain decoding: E = 1)

Acceptance is not the same for every token of a span: whether its *first* token is kept
depends most on the evidence behind it, and once one is kept the next ones mostly are. So an
n-gram span has two rates, ``a_1`` for its first token and ``a_then`` for each later one::

    E(k) = 1 + a_1 + a_1 a_then + ... + a_1 a_then^(k-1)

``T(w)`` is measured for each width the loop runs (and for 1, 2, 4, 8, ... at load and now and
then); a width not measured yet is costed on the straight line between its measured neighbours,
because each extra row costs about the same. On a GPU ``T`` is nearly flat, so long chains pay;
on a CPU every row adds a noticeable share of a one-row pass (its own attention over the cache,
more rows through each GEMM), so only the first few tokens of a likely chain do
(``docs/benchmarks.md``, "Pass prices"). ``a`` is measured per proposer and per *context*: for
n-gram lookup the length of the match that produced the span (a long match predicts far better
than a one-token one), how the other matches vote on its first token (``ngram.py``) and the
request's context (the completion mode: lookup is kept less often in rest-of-line completions
than in blocks), blended with what the current request has seen so far (a completion where
lookup keeps missing stops paying for it within a few passes). A span's kind starts from the
rates measured for it offline (``NGRAM_FIRST_PRIOR``), so even a session's first completion
leaves the poor bets alone. Other branches of the tree ride along only where a wider pass costs
no more (``FREE_RIDE``): on a GPU, not on a CPU.

The draft model runs only when its expected rate, its own steps included, beats not running it;
while it is off it is re-probed with growing gaps (16, 32, ... 512 passes). Widths the choice
never uses, and contexts whose acceptance looks too poor to try, are re-measured now and then
(growing gaps again), so a cost or a rate measured in a bad moment is not final.
"""

from __future__ import annotations

from dataclasses import dataclass

from .acceptance import (
    NGRAM_FIRST_PRIOR,
    NGRAM_PRIOR,
    NGRAM_THEN_PRIOR,
    Acceptance,
    SpanAcceptance,
    blend,
    evidence_bucket,
    expectations,
    expected_tokens,
    span_rates,
)

WIDTH_BUCKETS = (1, 2, 4, 8, 16, 32, 64)
WIDTH_PROBE_GAP = 64  # passes before a width the choice never uses is measured again
WIDTH_PROBE_MAX_GAP = 1024
ACCEPTANCE_PROBE_GAP = 16  # passes with an unverified offer before one token of it is tried
# A speculative pass must promise this much more than a plain one: pass costs are averages
# taken at other context lengths and moments, and a gain inside their noise is no gain.
MARGIN = 1.05
# A wider pass within 3% of the chosen width's cost is as good as free, among the widths whose
# cost is known (measured, or between two measured ones): past the widest measured, costs are
# guessed flat within a bucket so that chains get tried there and measured, and riders filling
# that guess would turn a chain into a much wider pass than it paid for.
FREE_RIDE = 1.03


def bucket(width: int) -> int:
    """The measured width bucket a pass of ``width`` tokens falls in."""
    return next((b for b in WIDTH_BUCKETS if width <= b), WIDTH_BUCKETS[-1])


class Ema:
    """Exponential moving average that starts at its first sample."""

    def __init__(self, alpha: float = 0.2, value: float | None = None) -> None:
        self.alpha = alpha
        self.value = value

    def add(self, x: float) -> None:
        self.value = x if self.value is None else (1 - self.alpha) * self.value + self.alpha * x


@dataclass
class Plan:
    """Whether the draft runs in the next target pass, and how far."""

    use_draft: bool
    draft_len: int


class SpeculationPolicy:
    """Online cost model + acceptance estimates -> the next pass's width and draft plan."""

    def __init__(self, max_nodes: int = 24, draft_len: int = 8, draft_mode: str = "auto") -> None:
        if draft_mode not in ("auto", "on", "off"):
            raise ValueError(f"draft_mode must be auto, on or off, not {draft_mode!r}")
        self.max_nodes_limit = max_nodes
        self.draft_len = draft_len
        self.draft_mode = draft_mode
        self.draft_enabled = draft_mode != "off"  # a draft model exists and may run
        self.pass_s: dict[int, Ema] = {}  # seconds a target pass, by width
        self.draft_step_s = Ema()
        # n-gram acceptance by (context, evidence bucket, support), from the priors when first seen
        self.ngram: dict[tuple[str, int, str], SpanAcceptance] = {}
        self.context = ""  # the current request's (``begin_request``)
        self.request_ngram = SpanAcceptance.tally()  # what this request's n-gram spans did
        self.draft = Acceptance(prior=0.6)
        self.draft_on = self.draft_enabled
        self.passes_since_probe = 0
        self.probe_gap = 16
        self.probe_max_lag = 32
        self.passes = 0
        self.last_measured: dict[int, int] = {}  # width -> pass count when last observed
        self.width_gap = {b: WIDTH_PROBE_GAP for b in WIDTH_BUCKETS}
        self.unverified_offers = 0
        self.probing: int | None = None  # the width bucket being re-measured
        self.decisions = {
            "draft_on": 0,
            "draft_off": 0,
            "probes": 0,
            "width_probes": 0,
            "acceptance_probes": 0,
            "plain_passes": 0,
        }

    # -- measurements ---------------------------------------------------------------------------

    def observe_pass(self, width: int, seconds: float) -> None:
        if self.probing is not None and bucket(width) == self.probing:
            self.pass_s[width] = Ema(value=seconds)  # a probe: a fresh measurement, no average
            self.probing = None
        else:
            self.pass_s.setdefault(width, Ema()).add(seconds)
        self.last_measured[width] = self.passes
        self.passes += 1

    def observe_draft(self, step_seconds: list[float], proposed: int, accepted: int) -> None:
        for s in step_seconds:
            self.draft_step_s.add(s)
        self.draft.add(proposed, accepted)

    def begin_request(self, context: str = "") -> None:
        """A new request; ``context`` keys what n-gram acceptance it learns and uses (what
        kind of completion it is, e.g. ``"line"``)."""
        self.context = context
        self.request_ngram = SpanAcceptance.tally()

    def _ngram(self, evidence: int, support: str) -> SpanAcceptance:
        length = evidence_bucket(evidence)
        key = (self.context, length, support)
        if key not in self.ngram:
            first = NGRAM_FIRST_PRIOR.get((min(length, 5), support), NGRAM_PRIOR)
            then = NGRAM_THEN_PRIOR[length] if support else NGRAM_PRIOR
            self.ngram[key] = SpanAcceptance(first, then)
        return self.ngram[key]

    def observe_ngram(self, evidence: int, proposed: int, accepted: int, support: str = "") -> None:
        """A span backed by a match of ``evidence`` tokens whose matches voted ``support``
        (``ngram.py``; "" for unknown): ``accepted`` of its first ``proposed`` tokens kept."""
        self._ngram(evidence, support).add(proposed, accepted)
        self.request_ngram.add(proposed, accepted)

    def ngram_rates(self, evidence: int, support: str = "") -> tuple[float, float]:
        """Acceptance of such a span's first token, and of each later one given the one before
        it was kept: the long-run rates for such spans, updated by this request's record."""
        kind = self._ngram(evidence, support)
        return (
            blend(self.request_ngram.first, kind.first.rate),
            blend(self.request_ngram.then, kind.then.rate),
        )

    def turn_draft_off(self) -> None:
        """The draft model is gone (released): never plan it again."""
        self.draft_enabled = self.draft_on = False
        self.draft_mode = "off"

    # -- decisions ------------------------------------------------------------------------------

    def measured_costs(self) -> list[tuple[int, float]]:
        """(width, seconds a pass) for every width measured so far, narrowest first."""
        return sorted((w, e.value) for w, e in self.pass_s.items() if e.value is not None)

    def verify_cost(self, width: int) -> float:
        """Estimated seconds for a target pass of ``width`` tokens: its own measurement, else the
        straight line between the nearest measured widths either side (each extra row costs
        about the same), else, past the widest measured, that one's cost plus 5 % per doubling
        of the width bucket (so wider passes get tried, and then measured)."""
        if width in self.pass_s and self.pass_s[width].value is not None:
            return self.pass_s[width].value
        known = self.measured_costs()
        if not known:
            return 1.0
        above = next(((w, t) for w, t in known if w > width), None)
        below = [(w, t) for w, t in known if w < width]
        if above is None:
            w0, t0 = below[-1]
            return t0 * 1.05 ** max(0, bucket(width).bit_length() - bucket(w0).bit_length())
        if not below:
            return above[1]
        (w0, t0), (w1, t1) = below[-1], above
        return t0 + (t1 - t0) * (width - w0) / (w1 - w0)

    def chain_length(self, rates: list[float]) -> int:
        """k*: how many tokens of a proposed chain to verify, given each token's acceptance
        (given the ones before it were accepted): E(k) = 1 + sum over i <= k of a_1 ... a_i."""
        offered = min(len(rates), self.max_nodes_limit)
        best_k, best_rate = 0, MARGIN / self.verify_cost(1)
        for k, expected in enumerate(expectations(rates[:offered]), start=1):
            rate = expected / self.verify_cost(1 + k)
            if rate > best_rate * 1.001:  # ties go to the narrower pass
                best_k, best_rate = k, rate
        if best_k == 0 and offered > 0:
            # Keep the estimate honest: now and then verify one token of an offer judged poor.
            self.unverified_offers += 1
            if self.unverified_offers >= ACCEPTANCE_PROBE_GAP:
                self.unverified_offers = 0
                self.decisions["acceptance_probes"] += 1
                return 1
        return best_k

    def width(self, chain: int, nodes: int) -> int:
        """Nodes to verify, given the chosen chain length and the tree's size: the chain, plus
        other branches where a wider pass costs no more (up to the chain's width bucket), or
        now and then the next bucket width above the chain's, to re-measure it (its cost may
        have been taken while another process had the cores)."""
        if chain == 0:
            self.decisions["plain_passes"] += 1
            return 0
        for b in WIDTH_BUCKETS:
            if b <= 1 + chain or b - 1 > min(nodes, self.max_nodes_limit):
                continue
            if self.passes - self.last_measured.get(b, 0) >= self.width_gap[b]:
                self.width_gap[b] = min(self.width_gap[b] * 2, WIDTH_PROBE_MAX_GAP)
                self.decisions["width_probes"] += 1
                self.probing = b
                return b - 1
            break  # only the next wider bucket is ever probed
        room = min(bucket(1 + chain), 1 + nodes, 1 + self.max_nodes_limit) - 1
        allowed = min(chain, room)
        cost = self.verify_cost(1 + allowed)
        measured = self.measured_costs()
        widest = measured[-1][0] if measured else 1
        while allowed < min(room, widest - 1) and self.verify_cost(2 + allowed) <= cost * FREE_RIDE:
            allowed += 1
        return allowed

    def _draft_pays(self, ngram_tokens: int, ngram_rates: tuple[float, float]) -> bool:
        """Compare the expected rate with and without drafting ``draft_len`` more tokens."""
        if self.draft_step_s.value is None:
            return True  # never measured: try it once
        n, k = ngram_tokens, self.draft_len
        span = span_rates(*ngram_rates, n)
        rate_without = expected_tokens(span) / self.verify_cost(1 + n)
        with_draft = expected_tokens(span + [self.draft.rate] * k)
        # k draft forwards, plus one to catch up on the tokens accepted since the last call
        cost = (k + 1) * self.draft_step_s.value + self.verify_cost(1 + n + k)
        return with_draft / cost > rate_without

    def draft_can_pay(self, best_acceptance: float = 0.8) -> bool:
        """Whether the draft could beat plain decoding at all on this machine: with the measured
        step and pass costs and an acceptance as good as a small draft of the same family gets
        on code (``best_acceptance``), some draft length gives more tokens per second."""
        if self.draft_step_s.value is None:
            return True
        plain = 1.0 / self.verify_cost(1)
        for k in range(1, self.draft_len + 1):
            cost = (k + 1) * self.draft_step_s.value + self.verify_cost(1 + k)
            if expected_tokens([best_acceptance] * k) / cost > plain:
                return True
        return False

    def plan(
        self, ngram_tokens: int, draft_lag: int = 0, ngram_rates: tuple[float, float] = (0.5, 0.5)
    ) -> Plan:
        """Plan the draft for the next pass, given how many n-gram tokens are on offer (and
        their acceptance) and how many context tokens the draft's cache lacks (a probe never
        pays for a long catch-up prefill)."""
        use_draft = self.draft_mode == "on"
        if self.draft_mode == "auto":
            self.passes_since_probe += 1
            pays = self._draft_pays(ngram_tokens, ngram_rates)
            if pays != self.draft_on:
                self.draft_on = pays
                self.probe_gap = 16
            if self.draft_on:
                use_draft = True
            elif self.passes_since_probe >= self.probe_gap and draft_lag <= self.probe_max_lag:
                use_draft = True  # probe: keep the estimate honest
                self.passes_since_probe = 0
                self.probe_gap = min(self.probe_gap * 2, 512)
                self.decisions["probes"] += 1
        if self.draft_enabled:
            self.decisions["draft_on" if use_draft else "draft_off"] += 1
        return Plan(use_draft=use_draft, draft_len=self.draft_len)
