"""Adaptive speculation policy: measure costs and acceptance online, pick what pays.

Per target pass we choose how many tree nodes to verify and whether to run the draft model.
The maths (Leviathan et al.; see ``../shared/anchors/specdec.md``): with per-token acceptance
``a`` and a chain of ``k`` proposed tokens, the expected tokens per target pass, bonus token
included, are::

    E(a, k) = (1 - a^(k+1)) / (1 - a)

and the rate of a plan is ``E / cost``, where ``cost = k_draft * T_draft + T_verify(width)``.
``T_verify(w)`` is measured per width bucket (on a CPU a pass of 8 costs ~1.1x a pass of 1; on a
GPU it is flat much further), ``T_draft`` per draft forward. The draft runs only when its
expected rate beats not running it; while it is off it is re-probed with growing gaps (16, 32,
... 512 passes), so a draft that pays on other hardware or later in a file comes back.
"""

from __future__ import annotations

from dataclasses import dataclass

WIDTH_BUCKETS = (1, 2, 4, 8, 16, 32, 64)
WIDTH_PROBE_GAP = 64  # passes between re-measurements of the next wider bucket


def chain_expected(a_first: float, n_first: int, a_then: float, n_then: int) -> float:
    """Expected tokens per pass for ``n_first`` tokens at acceptance ``a_first`` followed by
    ``n_then`` at ``a_then`` (an n-gram span the draft continues): 1 + sum of P(prefix kept).
    With ``n_first = 0`` this is E(a_then, n_then) of the module docstring."""
    a1, a2 = min(max(a_first, 0.0), 1.0), min(max(a_then, 0.0), 1.0)
    first = sum(a1**i for i in range(1, n_first + 1))
    then = a1**n_first * sum(a2**j for j in range(1, n_then + 1))
    return 1.0 + first + then


def _bucket(width: int) -> int:
    return next((b for b in WIDTH_BUCKETS if width <= b), WIDTH_BUCKETS[-1])


class Ema:
    """Exponential moving average that starts at its first sample."""

    def __init__(self, alpha: float = 0.2, value: float | None = None) -> None:
        self.alpha = alpha
        self.value = value

    def add(self, x: float) -> None:
        self.value = x if self.value is None else (1 - self.alpha) * self.value + self.alpha * x


class Acceptance:
    """Per-token acceptance rate a = accepted / (accepted + rejections), decayed."""

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


@dataclass
class Plan:
    """What to do in the next target pass."""

    use_draft: bool
    draft_len: int


class SpeculationPolicy:
    """Online cost model + acceptance estimates -> the next pass's plan."""

    def __init__(
        self,
        max_nodes: int = 24,
        draft_len: int = 8,
        width_slack: float = 1.35,
        draft_mode: str = "auto",
    ) -> None:
        if draft_mode not in ("auto", "on", "off"):
            raise ValueError(f"draft_mode must be auto, on or off, not {draft_mode!r}")
        self.max_nodes_limit = max_nodes
        self.draft_len = draft_len
        self.width_slack = width_slack  # accept a wider pass while T(w) <= slack * T(1)
        self.draft_mode = draft_mode
        self.draft_enabled = draft_mode != "off"  # a draft model exists and may run
        self.pass_s = {b: Ema() for b in WIDTH_BUCKETS}
        self.draft_step_s = Ema()
        self.ngram = Acceptance(prior=0.6)
        self.draft = Acceptance(prior=0.6)
        self.draft_on = self.draft_enabled
        self.passes_since_probe = 0
        self.probe_gap = 16
        self.probe_max_lag = 32
        self.budget_bucket = 1  # the widest bucket the last budget allowed without a probe
        self.passes_since_width_probe = 0
        self.decisions = {"draft_on": 0, "draft_off": 0, "probes": 0, "width_probes": 0}

    # -- measurements ---------------------------------------------------------------------------

    def observe_pass(self, width: int, seconds: float) -> None:
        bucket = _bucket(width)
        if bucket > self.budget_bucket:  # a width probe: a fresh measurement, not an average
            self.pass_s[bucket].value = seconds
            self.passes_since_width_probe = 0
        else:
            self.pass_s[bucket].add(seconds)

    def observe_draft(self, step_seconds: list[float], proposed: int, accepted: int) -> None:
        for s in step_seconds:
            self.draft_step_s.add(s)
        self.draft.add(proposed, accepted)

    def observe_ngram(self, proposed: int, accepted: int) -> None:
        self.ngram.add(proposed, accepted)

    # -- decisions ------------------------------------------------------------------------------

    def verify_cost(self, width: int) -> float:
        """Estimated seconds for a target pass of ``width`` tokens (nearest measured bucket)."""
        b = _bucket(width)
        if self.pass_s[b].value is not None:
            return self.pass_s[b].value
        known = [(k, e.value) for k, e in self.pass_s.items() if e.value is not None]
        if not known:
            return 1.0
        # Unmeasured width: assume the cost of the nearest smaller measured bucket, plus 5 %
        # per doubling, so wider passes get tried and then measured.
        smaller = [(k, v) for k, v in known if k <= b] or known[:1]
        k, v = max(smaller)
        doublings = max(0, b.bit_length() - k.bit_length())
        return v * (1.05**doublings)

    def width_budget(self) -> int:
        """Nodes for the next pass: the largest bucket whose pass costs at most ``width_slack``
        x a one-token pass. Every ``WIDTH_PROBE_GAP`` passes the next wider bucket is allowed
        once, so a cost measured in a slow moment (another process on the cores) is measured
        again instead of ruling that width out for good."""
        t1 = self.verify_cost(1)
        best = 1
        for b in WIDTH_BUCKETS:
            if b - 1 > self.max_nodes_limit:
                break
            if self.verify_cost(b) <= self.width_slack * t1:
                best = b
        self.budget_bucket = best
        self.passes_since_width_probe += 1
        wider = [b for b in WIDTH_BUCKETS if b > best and b - 1 <= self.max_nodes_limit]
        if wider and self.passes_since_width_probe >= WIDTH_PROBE_GAP:
            best = wider[0]  # stays allowed until a pass of that width has been measured
            self.decisions["width_probes"] += self.passes_since_width_probe == WIDTH_PROBE_GAP
        return max(1, min(best - 1, self.max_nodes_limit))

    def _draft_pays(self, ngram_tokens: int) -> bool:
        """Compare the expected rate with and without drafting ``draft_len`` more tokens."""
        if self.draft_step_s.value is None:
            return True  # never measured: try it once
        n, k = ngram_tokens, self.draft_len
        rate_without = chain_expected(self.ngram.rate, n, 0.0, 0) / self.verify_cost(1 + n)
        with_draft = chain_expected(self.ngram.rate, n, self.draft.rate, k)
        # k draft forwards, plus one to catch up on the tokens accepted since the last call
        cost = (k + 1) * self.draft_step_s.value + self.verify_cost(1 + n + k)
        return with_draft / cost > rate_without

    def plan(self, ngram_tokens: int, draft_lag: int = 0) -> Plan:
        """Plan the next pass, given how many n-gram tokens are on offer and how many context
        tokens the draft's cache lacks (a probe never pays for a long catch-up prefill)."""
        use_draft = self.draft_mode == "on"
        if self.draft_mode == "auto":
            self.passes_since_probe += 1
            pays = self._draft_pays(ngram_tokens)
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
