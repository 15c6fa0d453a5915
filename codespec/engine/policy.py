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

``T(w)`` is measured as passes run (``costs.py``). On a GPU it is nearly flat, so long chains pay;
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

Asking is free: ``plan_draft`` and ``decide`` only read. What they return says which probe it
runs, and ``commit`` (called once the loop acts on it) counts it and moves the schedules.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .acceptance import AcceptanceBook, expectations, expected_tokens, span_rates
from .costs import PassCosts, WidthProbes, bucket

ACCEPTANCE_PROBE_GAP = 16  # passes with an unverified offer before one token of it is tried
DRAFT_PROBE_GAP = 16  # passes with the draft off before it is tried again (doubles, to 512)
DRAFT_PROBE_MAX_GAP = 512
DRAFT_PROBE_MAX_LAG = 32  # a probe never pays for a longer catch-up prefill of the draft
# A speculative pass must promise this much more than a plain one: pass costs are averages
# taken at other context lengths and moments, and a gain inside their noise is no gain.
MARGIN = 1.05
# A wider pass within 3% of the chosen width's cost is as good as free, among the widths whose
# cost is known (measured, or between two measured ones): past the widest measured, costs are
# guessed (``costs.py``) so that chains get tried there and measured, and riders filling that
# guess would turn a chain into a much wider pass than it paid for.
FREE_RIDE = 1.03


@dataclass(frozen=True)
class DraftPlan:
    """Whether the draft runs in the next target pass, and how far."""

    use_draft: bool
    draft_len: int
    pays: bool = False  # the cost model's verdict (in "auto" mode)
    probe: bool = False  # it runs although it does not pay: a re-measurement


@dataclass(frozen=True)
class Verify:
    """What the next target pass verifies of the proposed tree."""

    chain: int  # tokens of the main chain
    nodes: int  # nodes in all: the chain, riders beside it, or a width probe's fill
    judged_poor: bool = False  # tokens were offered and the cost model verifies none
    acceptance_probe: bool = False  # ... so one is verified anyway, to keep measuring them
    width_probe: int | None = None  # the width bucket this pass re-measures


# Tree nodes one pass may verify at most (a backend may allow fewer: ``max_pass_rows``).
MAX_NODES = 24


class SpeculationPolicy:
    """Pass costs + acceptance -> the next pass's width and draft plan."""

    def __init__(
        self, max_nodes: int = MAX_NODES, draft_len: int = 8, draft_mode: str = "auto"
    ) -> None:
        if draft_mode not in ("auto", "on", "off"):
            raise ValueError(f"draft_mode must be auto, on or off, not {draft_mode!r}")
        self.max_nodes_limit = max_nodes
        self.draft_len = draft_len
        self.draft_mode = draft_mode
        self.draft_enabled = draft_mode != "off"  # a draft model exists and may run
        self.costs = PassCosts()
        self.acceptance = AcceptanceBook()
        self.width_probes = WidthProbes()
        self.draft_on = self.draft_enabled  # the cost model's last verdict on the draft
        self.passes_since_draft_probe = 0
        self.draft_probe_gap = DRAFT_PROBE_GAP
        self.unverified_offers = 0
        self.decisions = {
            "draft_on": 0,
            "draft_off": 0,
            "probes": 0,
            "width_probes": 0,
            "acceptance_probes": 0,
            "plain_passes": 0,
        }

    def observe_draft(self, step_seconds: list[float], proposed: int, accepted: int) -> None:
        for s in step_seconds:
            self.costs.draft_step_s.add(s)
        self.acceptance.draft.add(proposed, accepted)

    def turn_draft_off(self) -> None:
        """The draft model is gone (released): never plan it again."""
        self.draft_enabled = self.draft_on = False
        self.draft_mode = "off"

    # -- questions (no side effects) ------------------------------------------------------------

    def chain_length(self, rates: list[float]) -> int:
        """k*: how many tokens of a proposed chain to verify, given each token's acceptance
        (given the ones before it were accepted): E(k) = 1 + sum over i <= k of a_1 ... a_i."""
        price = self.costs.price
        offered = min(len(rates), self.max_nodes_limit)
        best_k, best_rate = 0, MARGIN / price(1)
        for k, expected in enumerate(expectations(rates[:offered]), start=1):
            rate = expected / price(1 + k)
            if rate > best_rate * 1.001:  # ties go to the narrower pass
                best_k, best_rate = k, rate
        return best_k

    def width(self, chain: int, nodes: int) -> int:
        """Nodes to verify for a chain of ``chain`` tokens in a tree of ``nodes``: the chain,
        plus other branches where a wider pass costs no more (``FREE_RIDE``), up to the chain's
        width bucket and only among widths whose cost is known (measured, or between two
        measured ones)."""
        if chain == 0:
            return 0
        price = self.costs.price
        room = min(bucket(1 + chain), 1 + nodes, 1 + self.max_nodes_limit) - 1
        allowed = min(chain, room)
        cost = price(1 + allowed)
        widest = self.costs.widest_measured()
        while allowed < min(room, widest - 1) and price(2 + allowed) <= cost * FREE_RIDE:
            allowed += 1
        return allowed

    def decide(self, rates: list[float], nodes: int, horizon: int | None = None) -> Verify:
        """What to verify of a tree of ``nodes`` whose main chain's tokens are kept at
        ``rates``, never past ``horizon`` tokens (where the stop rules end generation). Now and
        then one token of an offer judged poor is verified (its acceptance may have changed),
        or the next width bucket above the chain's is run (its cost may have been taken while
        another process had the cores)."""
        offered = min(len(rates), self.max_nodes_limit)
        best = self.chain_length(rates)
        judged_poor = best == 0 and offered > 0
        acceptance_probe = judged_poor and self.unverified_offers + 1 >= ACCEPTANCE_PROBE_GAP
        chain = 1 if acceptance_probe else best
        if horizon is not None:
            chain = min(chain, horizon)
        verify = self.verify_chain(chain, nodes)
        return replace(verify, judged_poor=judged_poor, acceptance_probe=acceptance_probe)

    def verify_chain(self, chain: int, nodes: int) -> Verify:
        """What to verify for a chain of ``chain`` tokens in a tree of ``nodes``: ``width``'s
        answer, or the next width bucket above the chain's when it is due to be measured."""
        if chain == 0:
            return Verify(0, 0)
        probe = self.width_probes.due(self.costs, chain, min(nodes, self.max_nodes_limit))
        if probe is not None:
            return Verify(chain, probe - 1, width_probe=probe)
        return Verify(chain, self.width(chain, nodes))

    def _draft_pays(self, span_tokens: int, lead_rates: tuple[float, float]) -> bool:
        """Compare the expected rate with and without drafting ``draft_len`` more tokens."""
        step = self.costs.draft_step_s.value
        if step is None:
            return True  # never measured: try it once
        n, k, price = span_tokens, self.draft_len, self.costs.price
        span = span_rates(*lead_rates, n)
        rate_without = expected_tokens(span) / price(1 + n)
        with_draft = expected_tokens(span + [self.acceptance.draft.rate] * k)
        # k draft forwards, plus one to catch up on the tokens accepted since the last call
        cost = (k + 1) * step + price(1 + n + k)
        return with_draft / cost > rate_without

    def draft_can_pay(self, best_acceptance: float = 0.8) -> bool:
        """Whether the draft could beat plain decoding at all on this machine: with the measured
        step and pass costs and an acceptance as good as a small draft of the same family gets
        on code (``best_acceptance``), some draft length gives more tokens per second."""
        step = self.costs.draft_step_s.value
        if step is None:
            return True
        price = self.costs.price
        plain = 1.0 / price(1)
        for k in range(1, self.draft_len + 1):
            cost = (k + 1) * step + price(1 + k)
            if expected_tokens([best_acceptance] * k) / cost > plain:
                return True
        return False

    def plan_draft(
        self, span_tokens: int, draft_lag: int = 0, lead_rates: tuple[float, float] = (0.5, 0.5)
    ) -> DraftPlan:
        """Plan the draft for the next pass, given how many n-gram tokens are on offer (and
        their acceptance) and how many context tokens the draft's cache lacks (a probe never
        pays for a long catch-up prefill)."""
        if self.draft_mode != "auto":
            return DraftPlan(use_draft=self.draft_mode == "on", draft_len=self.draft_len)
        pays = self._draft_pays(span_tokens, lead_rates)
        gap = DRAFT_PROBE_GAP if pays != self.draft_on else self.draft_probe_gap
        probe = (
            not pays
            and self.passes_since_draft_probe + 1 >= gap
            and draft_lag <= DRAFT_PROBE_MAX_LAG
        )
        return DraftPlan(pays or probe, self.draft_len, pays, probe)

    # -- acting on an answer --------------------------------------------------------------------

    def commit(self, decision: DraftPlan | Verify) -> None:
        """The loop acts on ``decision``: count it, and move the probe schedules."""
        if isinstance(decision, DraftPlan):
            self._commit_draft(decision)
            return
        if decision.judged_poor:
            if decision.acceptance_probe:
                self.unverified_offers = 0
                self.decisions["acceptance_probes"] += 1
            else:
                self.unverified_offers += 1
        if decision.chain == 0:
            self.decisions["plain_passes"] += 1
        if decision.width_probe is not None:
            self.width_probes.started(self.costs, decision.width_probe)
            self.decisions["width_probes"] += 1

    def _commit_draft(self, plan: DraftPlan) -> None:
        if self.draft_mode == "auto":
            self.passes_since_draft_probe += 1
            if plan.pays != self.draft_on:
                self.draft_on, self.draft_probe_gap = plan.pays, DRAFT_PROBE_GAP
            if plan.probe:
                self.passes_since_draft_probe = 0
                self.draft_probe_gap = min(self.draft_probe_gap * 2, DRAFT_PROBE_MAX_GAP)
                self.decisions["probes"] += 1
        if self.draft_enabled:
            self.decisions["draft_on" if plan.use_draft else "draft_off"] += 1
