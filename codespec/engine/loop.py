"""The decode loop: propose -> verify in one target pass -> accept -> learn -> stop -> yield.

The engine knows nothing about text: it turns a prompt (token ids) into generated token ids.
One call of ``Engine.generate`` returns a ``Generation``, an iterator over the tokens accepted by
each target pass (for streaming), whose ``stats`` hold the per-request counters (``request.py``).

State between target passes::

    target cache = prompt + generated[:-1]        the last generated token is *pending*:
    pending      = generated[-1]                  chosen by the target, not yet in its cache

Each pass reads ``[pending] + tree nodes``; the logits at the pending token and at every node
say what the target would choose next there, so one pass confirms a whole accepted path plus
one bonus token of the target's own. Plain decoding (``speculate=False``) is the same loop with
an empty tree: one token per pass, same kernels, same cache. That is what "greedy output is
token-identical to plain decoding" is tested against.

The engine is composed of small parts, each in a module of its own: the proposers it loops
over (``proposers.py``), the policy (``policy.py``), what calibration measured and the draft's
life (``calibration.py``), warm-ups and look-ahead (``warmup.py``).
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch

from ..machine import FreeCores
from ..memory import return_freed_memory
from .acceptance import kept_moments
from .backend import TargetBackend
from .calibration import PREFILL_CHUNK_S, Calibration, DraftLife
from .corpus import CorpusProposer
from .draft import DraftProposer
from .ngram import NgramProposer
from .policy import SpeculationPolicy
from .proposers import (
    DRAFT,
    LOOKUP_SOURCES,
    NGRAM,
    SOURCES,
    WORKSPACE,
    Kind,
    Proposals,
    Proposer,
    Sampling,
)
from .request import Generation, GenerationParams, GenerationStats, Output, StopRule
from .slots import common_prefix_len
from .stop import Cancelled, StopSignal
from .timing import timed
from .tree import Candidate, TokenTree
from .verify import logits_to_probs, sample, walk_tree
from .warmup import WarmUps

ROOT = -1  # the tree's root (the pending token), as ``TokenTree.parents`` names it


@dataclass
class Proposal:
    """One pass's token tree and what the loop learns from it once the target has judged it."""

    tree: TokenTree
    # per lookup source that offered spans (``LOOKUP_SOURCES``), in the tree's order: its
    # best span's match length and how the other matches voted on its first token (ngram.py)
    spans: dict[str, tuple[int, str]] = field(default_factory=dict)
    # the draft's part: the node it grew below (ROOT: the root) and what its steps cost; None
    # when it did not run, or when the node it grew below is not verified in this pass
    draft_under: int | None = None
    draft: Proposals | None = None
    bet: list[float] = field(default_factory=list)  # predicted rates of the verified main chain


class Engine:
    """A resident target model, its proposers, and the speculative decode loop.

    It is a ``generator.Generator`` that can warm (``generator.Warming``)."""

    label = "local"

    def __init__(
        self,
        target: TargetBackend,
        draft: TargetBackend | None = None,
        stop_ids: set[int] | None = None,
        policy: SpeculationPolicy | None = None,
        ngram: NgramProposer | None = None,
        draft_threshold: float = 0.6,
        free_threads: Callable[[], int] | None = None,
    ) -> None:
        self.target = target
        # threads for the next request: one fewer per core other processes keep busy
        self.max_threads = target.threads
        self.free_threads = free_threads or FreeCores(cores=self.max_threads).free
        target.use_width_independent_rows()  # the same logits for a position in any pass
        # nodes a pass may verify besides the pending token: a backend whose rows are exact
        # only up to some width says so (ggml: ``ggml/backend.py``), whatever the policy says
        self.max_tree_nodes = target.max_pass_rows - 1
        self.stop_ids = set(stop_ids or ())
        # the proposers, lookups first (their spans lead the tree); the workspace lookup is
        # fed per request (``GenerationParams.corpora``)
        self.proposers: list[Proposer] = [ngram or NgramProposer(), CorpusProposer()]
        if draft is not None:
            self.proposers.append(DraftProposer(draft, threshold=draft_threshold))
        self.policy = policy or SpeculationPolicy(draft_mode="auto" if draft else "off")
        self.policy.costs.use_threads(self.max_threads)  # what calibration will measure
        self.lock = threading.Lock()  # one generation at a time owns the caches
        self.calibration = Calibration()
        self.draft_life = DraftLife()
        self.warm_ups = WarmUps(target, self.lock, self.stop_ids, self.calibration)

    # -- what the generator seam asks (``generator.py``) --------------------------------------

    @property
    def prefill_rate(self) -> float | None:
        """Prompt tokens per second, measured at load (None before ``calibrate``)."""
        return self.calibration.prefill_rate

    @property
    def warming(self) -> Engine:
        """Warm-ups and look-ahead run here (``generator.Warming``)."""
        return self

    @property
    def uses_corpora(self) -> bool:
        """The workspace lookup drafts from the corpora a request gives."""
        return any(p.name == WORKSPACE for p in self.proposers)

    health = None  # (a remote engine's reachability: none here)

    def passes_run(self) -> int:
        """Target passes run so far (cancel checks count them)."""
        return self.target.forward_calls

    def warm(self, prompt: list[int], stop: StopSignal, chunk_s: float = PREFILL_CHUNK_S) -> int:
        """Prefill a place's prompt before its request comes (``WarmUps.warm``)."""
        return self.warm_ups.warm(prompt, stop, chunk_s)

    def look_ahead(
        self,
        prompt: list[int],
        next_prompts: Callable[[torch.Tensor], list[list[int]]],
        stop: StopSignal,
    ) -> int:
        """Compute the next keystrokes' prompts ahead (``WarmUps.look_ahead``)."""
        return self.warm_ups.look_ahead(prompt, next_prompts, stop)

    # -- the proposers and the draft's life ------------------------------------------------

    @property
    def drafter(self) -> DraftProposer | None:
        """The draft model's proposer, while the draft is kept."""
        return next((p for p in self.proposers if isinstance(p, DraftProposer)), None)

    def calibrate(self) -> None:
        """Measure this machine at load (``Calibration.measure``) and judge the draft on it."""
        self.calibration.measure(self.target, self.policy, self.drafter)
        if self.drafter is not None and self.draft_life.cannot_pay(self.policy, running=False):
            self.release_draft()

    def release_draft(self) -> None:
        """Drop the draft model (its memory goes with it) and say why (``DraftLife``)."""
        self.proposers = [p for p in self.proposers if p.kind != Kind.DRAFT]
        self.draft_life.released(self.policy)

    def reconsider_draft(self) -> bool:
        """Release the draft if the costs measured in real requests say it cannot pay.
        Returns whether it was released now."""
        if self.drafter is None or not self.draft_life.cannot_pay(self.policy, running=True):
            return False
        self.release_draft()
        return_freed_memory(collect=True)
        return True

    def generate(
        self,
        prompt: list[int],
        params: GenerationParams | None = None,
        stop: StopSignal | None = None,
        stop_rule: StopRule | None = None,
    ) -> Generation:
        """Start generating; iterate the result to run it (lazily, pass by pass). ``stop``
        ends it early: at a prefill chunk's end, or between two layers (``stop.py``)."""
        params = params or GenerationParams()
        stats = GenerationStats()
        out = Output(self.stop_ids, params.max_tokens, stop_rule, stats)
        return Generation(self._decode(prompt, params, stop, out), stats, out.tokens)

    # -- the loop -----------------------------------------------------------------------------

    def _decode(
        self, prompt: list[int], params: GenerationParams, stop: StopSignal | None, out: Output
    ) -> Iterator[list[int]]:
        stats, t0 = out.stats, time.perf_counter()
        sampling = Sampling(params.temperature, _rng(params))
        with self.lock:
            stats.threads = self._fit_threads()
            self.policy.acceptance.begin_request(params.context)
            active = [p for p in self.proposers if params.speculate and p.begin(params)]
            try:
                # 1) Prefill: reuse the cached prefix, compute the new tail, pick the first token.
                logits, stats.cached_tokens, stats.prefill_tokens = self.target.prefill(
                    prompt, stop
                )
                stats.ahead = stats.prefill_tokens == 0  # (a prefill computes at least one row)
                self.warm_ups.request_ran(prompt, logits)
                stats.prefill_s = time.perf_counter() - t0
                pending = self._choose(logits, sampling)
                first = out.push([pending])
                stats.ttft_s = time.perf_counter() - t0
                if first:
                    yield first
                while not out.done:
                    if stop is not None and stop.at_chunk_end():
                        raise Cancelled()
                    # 2) Propose: n-gram spans and/or a draft chain, merged into one tree.
                    proposal = self._propose(active, prompt, out, params, sampling)
                    tree = proposal.tree
                    # 3) Verify: ONE target pass over [pending] + tree (a stop ends it between
                    # two layers: its tokens would be thrown away anyway).
                    base = len(self.target.sequence())
                    (logits, rows), seconds = timed(self._verify, pending, tree, stop)
                    if rows == 1 + len(tree):  # (a pass whose pending row was computed
                        self.policy.costs.observe_pass(rows, seconds)  # ahead is narrower)
                    # 4) Accept: walk the tree with the target's own choices; keep that path.
                    path, bonus = walk_tree(tree, logits, params.temperature, sampling.rng)
                    self.target.keep(base + 1, [base + 1 + i for i in path])
                    # 5) Learn: acceptance per proposer, costs, counters.
                    stats.pass_log.append((1 + len(tree), len(path), seconds))
                    self._learn(active, proposal, path, stats)
                    # 6) Emit the accepted tokens and the bonus; stop rules may cut them.
                    pending = bonus
                    fresh = out.push([tree.tokens[i] for i in path] + [bonus])
                    if fresh:
                        yield fresh
            except Cancelled:
                out.done, stats.stop_reason = True, "cancelled"
            finally:
                stats.total_s = time.perf_counter() - t0
                self.reconsider_draft()

    def _fit_threads(self) -> int:
        """As many threads as cores are free now (``machine.FreeCores``: spinning threads on
        a taken core cost far more than the core they lost)."""
        n = self.free_threads()
        self.policy.costs.use_threads(n)
        self.target.use_threads(n)
        if self.drafter is not None:
            self.drafter.model.use_threads(n)
        return n

    # -- steps --------------------------------------------------------------------------------

    @staticmethod
    def _choose(logits: torch.Tensor, sampling: Sampling) -> int:
        """The target's own next token: argmax, or a sample at the temperature."""
        if sampling.temperature <= 0:
            return int(torch.argmax(logits).item())
        return sample(logits_to_probs(logits, sampling.temperature), sampling.rng)

    def _propose(
        self,
        active: list[Proposer],
        prompt: list[int],
        out: Output,
        params: GenerationParams,
        sampling: Sampling,
    ) -> Proposal:
        """Build this pass's token tree, sized by the policy."""
        remaining = params.max_tokens - len(out.tokens)
        proposal = Proposal(TokenTree())
        # A pass emits at most depth + 1 tokens: never propose past the token limit.
        cap = min(self.policy.max_nodes_limit, self.max_tree_nodes, remaining - 1)
        if not active or cap <= 0:
            return proposal
        tree = proposal.tree
        offers = self._look_up(active, prompt, out.tokens, cap, params, sampling)
        # The longer match leads (it becomes the main chain); on a tie the prompt's own lookup
        # does, its text being nearer the cursor.
        for source in sorted(offers, key=lambda source: -offers[source][0].evidence):
            for candidate in offers[source]:
                tree.add(candidate, cap)
            proposal.spans[source] = (offers[source][0].evidence, offers[source][0].support)
        book = self.policy.acceptance
        span_rates = {
            source: book.span_rates(*found, source=source)
            for source, found in (proposal.spans or {NGRAM: (0, "")}).items()
        }
        lead_rates = next(iter(span_rates.values()))
        for drafter in (p for p in active if p.kind == Kind.DRAFT):
            context = drafter.context(prompt, out.tokens, params)
            self._draft(drafter, proposal, context, cap, remaining, sampling, lead_rates)
        # Verify the k* first tokens of the main chain that pay (policy.py), plus what fits
        # beside them in the same width bucket at no extra cost.
        chain = tree.main_chain()
        rates = [
            _node_rate(tree.sources[i], depth, span_rates, book.draft.rate)
            for depth, i in enumerate(chain)
        ]
        # ... and none past where the stop rules would end generation (wasted width).
        verify = self.policy.decide(rates, len(tree), out.horizon([tree.tokens[i] for i in chain]))
        self.policy.commit(verify)
        k, width = verify.chain, verify.nodes
        keep = chain[:k] + [i for i in range(len(tree)) if i not in chain][: max(0, width - k)]
        keep = [i for i in keep if all(p in keep for p in tree.path_to(i)[:-1])]
        proposal.tree, index = tree.subset(keep)
        if proposal.draft_under not in (None, ROOT):
            proposal.draft_under = index.get(proposal.draft_under)
        if proposal.draft_under is None:
            proposal.draft = None
        proposal.bet = rates[:k]
        return proposal

    @staticmethod
    def _look_up(
        active: list[Proposer],
        prompt: list[int],
        generated: list[int],
        cap: int,
        params: GenerationParams,
        sampling: Sampling,
    ) -> dict[str, list[Candidate]]:
        """The lookup proposers' spans, by source, each over the context it reads."""
        offers: dict[str, list[Candidate]] = {}
        for proposer in active:
            if proposer.kind == Kind.LOOKUP:
                context = proposer.context(prompt, generated, params)
                offers[proposer.name] = proposer.propose(context, cap, sampling).candidates
        return {source: found for source, found in offers.items() if found}

    def _draft(
        self,
        drafter: Proposer,
        proposal: Proposal,
        context: list[int],
        cap: int,
        remaining: int,
        sampling: Sampling,
        lead_rates: tuple[float, float],
    ) -> None:
        """Let the draft continue the leading lookup span (or start at the root) when the
        policy says it pays. It grows from a leaf, so its sampled tokens never share a node with
        a deterministic proposal."""
        tree = proposal.tree
        looked_up = [i for i in tree.main_chain() if tree.sources[i] & set(LOOKUP_SOURCES)]
        plan = self.policy.plan_draft(len(looked_up), drafter.lag(context), lead_rates)
        self.policy.commit(plan)
        if not plan.use_draft:
            return
        under = looked_up[-1] if looked_up else ROOT
        depth = tree.depths[under] if under != ROOT else 0
        room = min(plan.draft_len, cap - len(tree), remaining - 1 - depth)
        if room <= 0:
            return
        prefix = [tree.tokens[i] for i in tree.path_to(under)]
        drafted = drafter.propose(context + prefix, room, sampling)
        for candidate in drafted.candidates:
            tree.add(candidate, cap, under=under)
        proposal.draft_under, proposal.draft = under, drafted

    def _verify(
        self, pending: int, tree: TokenTree, stop: StopSignal | None = None
    ) -> tuple[torch.Tensor, int]:
        """Logits at [pending] + every node, from one target forward pass (``stop``: see
        ``TargetBackend.forward``), and the rows that pass computed.

        Where a one-row pass rounds differently from wider ones (dense bf16 GEMMs on some CPUs;
        ``calibrate`` checks), a lone pending token gets a padding row after it, whose logits
        are ignored and whose cache entry ``keep`` drops: plain decoding (one token per pass)
        then stays bit-identical to verification (see ``attention.py``). Where one-row passes
        are exact anyway (the int4/int8 kernels compute each row alone), no padding is paid.

        Where the pending token's row was computed ahead (``look_ahead``: the target's choice
        after a prompt it computed ahead), its logits come from there and the pass computes
        the nodes only: each row's numbers are its own, so they are the same bits.
        """
        forward = functools.partial(self.target.forward, stop=stop)
        with_pending = [*self.target.sequence(), pending]
        if (ahead := self.target.ahead_logits(with_pending)) is not None:
            self.target.end_look_ahead(with_pending)  # keeps that row: no pass
            if not tree.tokens:
                return ahead[None], 0
            if tree.is_chain():
                rows = forward(tree.tokens)
            else:
                mask, depths = tree.attention()
                rows = forward(
                    tree.tokens, tree_mask=mask[1:, 1:], depths=[d - 1 for d in depths[1:]]
                )
            return torch.cat([ahead[None], rows]), len(tree)
        if not tree.tokens:
            if not self.calibration.pad_single_row:
                return forward([pending]), 1
            return forward([pending, pending])[:1], 1
        tokens = [pending] + tree.tokens
        if tree.is_chain():  # a chain is plain causal attention: no mask needed
            return forward(tokens), len(tokens)
        mask, depths = tree.attention()
        return forward(tokens, tree_mask=mask, depths=depths), len(tokens)

    def _learn(
        self, active: list[Proposer], proposal: Proposal, path: list[int], stats: GenerationStats
    ) -> None:
        tree = proposal.tree
        stats.target_passes += 1
        stats.accepted_per_pass.append(len(path))
        kept = set(path)
        by_name = {p.name: p for p in active}
        for source in SOURCES:
            nodes = [i for i, s in enumerate(tree.sources) if source in s]
            stats.proposed[source] += len(nodes)
            stats.accepted[source] += sum(1 for i in nodes if i in kept)
        # Lookups: judge each source's best branch (its first child chain) by how far the path
        # followed it.
        for source, (evidence, support) in proposal.spans.items():
            first_branch = _first_chain(tree, source)
            if first_branch:
                taken = sum(1 for i in first_branch if i in kept)
                by_name[source].observe(len(first_branch), taken)
                self.policy.acceptance.observe_span(
                    evidence, len(first_branch), taken, support, source=source
                )
        if proposal.draft is not None:
            stats.draft_passes += 1
            stats.draft_forwards += proposal.draft.forwards
            draft_nodes = [i for i, s in enumerate(tree.sources) if DRAFT in s]
            reached = proposal.draft_under == ROOT or proposal.draft_under in kept
            # Tokens the target never got to judge (the path broke off earlier) are not evidence.
            proposed = len(draft_nodes) if reached else 0
            taken = sum(1 for i in draft_nodes if i in kept) if reached else 0
            if DRAFT in by_name:
                by_name[DRAFT].observe(proposed, taken)
            self.policy.observe_draft(proposal.draft.step_s, proposed, taken)
        if proposal.bet:  # kept: how far the path followed the chain the bet was on
            chain = tree.main_chain()[: len(proposal.bet)]
            mean, variance = kept_moments(proposal.bet)
            stats.bets.append((proposal.bet[0], mean, variance, common_prefix_len(path, chain)))


def _rng(params: GenerationParams) -> torch.Generator | None:
    """The request's random generator when it samples (seeded, or from the clock)."""
    if params.temperature <= 0:
        return None
    rng = torch.Generator(device="cpu")
    rng.manual_seed(params.seed if params.seed is not None else int(time.time_ns()))
    return rng


def _node_rate(
    sources: set[str], depth: int, span_rates: dict[str, tuple[float, float]], draft_rate: float
) -> float:
    """The predicted acceptance of a main-chain node: its leading lookup source's rate at that
    depth (the first token's, or a later one's), else the draft's."""
    for source, (first, then) in span_rates.items():
        if source in sources:
            return first if depth == 0 else then
    return draft_rate


def _first_chain(tree: TokenTree, source: str) -> list[int]:
    """Nodes along the first-child chain from the root that carry ``source``."""
    chain, node = [], ROOT
    while True:
        kids = [k for k in tree.children(node) if source in tree.sources[k]]
        if not kids:
            return chain
        node = kids[0]
        chain.append(node)
