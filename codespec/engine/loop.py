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
over (``proposers.py``) and the tree built from them (``proposal.py``), the policy
(``policy.py``), what calibration measured and the draft's life (``calibration.py``), warm-ups
and look-ahead (``warmup.py``).
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterator

import numpy as np

from ..machine import FreeCores
from ..memory import return_freed_memory
from . import proposal as proposing
from .backend import TargetBackend
from .calibration import PREFILL_CHUNK_S, Calibration, DraftLife
from .corpus import CorpusProposer
from .draft import DraftModel, DraftProposer
from .ngram import NgramProposer
from .policy import SpeculationPolicy
from .proposers import (
    WORKSPACE,
    Kind,
    Proposer,
    Sampling,
)
from .request import Generation, GenerationParams, GenerationStats, Output, StopRule
from .rewrite import RewriteProposer
from .stop import Cancelled, StopSignal
from .timing import timed
from .tree import Logits, TokenTree
from .verify import chosen_probabilities, logits_to_probs, sample, walk_tree
from .warmup import WarmUps


class Engine:
    """A resident target model, its proposers, and the speculative decode loop.

    It is a ``generator.Generator`` that can warm (``generator.Warming``)."""

    label = "local"

    def __init__(
        self,
        target: TargetBackend,
        draft: DraftModel | None = None,
        stop_ids: set[int] | None = None,
        policy: SpeculationPolicy | None = None,
        ngram: NgramProposer | None = None,
        draft_threshold: float = 0.6,
        free_threads: Callable[[], int] | None = None,
        exact: bool = True,
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
        self.proposers: list[Proposer] = [
            ngram or NgramProposer(),
            CorpusProposer(),
            RewriteProposer(),
        ]
        if draft is not None:
            self.proposers.append(DraftProposer(draft, threshold=draft_threshold))
        self.policy = policy or SpeculationPolicy(draft_mode="auto" if draft else "off")
        self.policy.costs.use_threads(self.max_threads)  # what calibration will measure
        self.lock = threading.Lock()  # one generation at a time owns the caches
        self.calibration = Calibration(exact=exact)
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
        next_prompts: Callable[[Logits], list[list[int]]],
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
                if params.keep_probabilities:
                    stats.chosen_p += chosen_probabilities(logits.reshape(1, -1), [pending])
                first = out.push([pending])
                stats.ttft_s = time.perf_counter() - t0
                if first:
                    yield first
                while not out.done:
                    if stop is not None and stop.at_chunk_end():
                        raise Cancelled()
                    # 2) Propose: n-gram spans and/or a draft chain, merged into one tree.
                    proposal = proposing.build(
                        self.policy, self.max_tree_nodes, active, prompt, out, params, sampling
                    )
                    tree = proposal.tree
                    # 3) Verify: ONE target pass over [pending] + tree (a stop ends it between
                    # two layers: its tokens would be thrown away anyway).
                    base = len(self.target.ahead.sequence())
                    (logits, rows), seconds = timed(self._verify, pending, tree, stop)
                    if rows == 1 + len(tree):  # (a pass whose pending row was computed
                        self.policy.costs.observe_pass(rows, seconds)  # ahead is narrower)
                    # 4) Accept: walk the tree with the target's own choices; keep that path.
                    path, bonus = walk_tree(tree, logits, params.temperature, sampling.rng)
                    self.target.keep(base + 1, [base + 1 + i for i in path])
                    # 5) Learn: acceptance per proposer, costs, counters.
                    stats.pass_log.append((1 + len(tree), len(path), seconds))
                    proposing.learn(self.policy, active, proposal, path, stats)
                    # 6) Emit the accepted tokens and the bonus; stop rules may cut them.
                    pending = bonus
                    emitted = [tree.tokens[i] for i in path] + [bonus]
                    if params.keep_probabilities:  # (row 0 chose the first; node i's row, i + 1)
                        chosen_rows = logits[[0] + [i + 1 for i in path]]
                        stats.chosen_p += chosen_probabilities(chosen_rows, emitted)
                    fresh = out.push(emitted)
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
    def _choose(logits: Logits, sampling: Sampling) -> int:
        """The target's own next token: argmax, or a sample at the temperature."""
        if sampling.temperature <= 0:
            return int(np.argmax(logits))
        return sample(logits_to_probs(logits, sampling.temperature), sampling.rng)

    def _verify(
        self, pending: int, tree: TokenTree, stop: StopSignal | None = None
    ) -> tuple[Logits, int]:
        """Logits at [pending] + every node, from one target forward pass (``stop``: see
        ``TargetBackend.forward``), and the rows that pass computed.

        Where exact rows are asked for and a one-row pass rounds differently from wider ones
        (dense bf16 GEMMs on some CPUs; ``calibrate`` checks), a lone pending token gets a
        padding row after it, whose logits are ignored and whose cache entry ``keep`` drops: plain
        decoding (one token per pass) then stays bit-identical to verification (see
        ``torch_backend/attention.py``). Where one-row passes are exact anyway (the int4/int8
        kernels compute each row alone), or exactness is not asked for, no padding is paid.

        Where the pending token's row was computed ahead (``look_ahead``: the target's choice
        after a prompt it computed ahead), its logits come from there and the pass computes
        the nodes only: each row's numbers are its own, so they are the same bits.
        """
        forward = functools.partial(self.target.forward, stop=stop)
        with_pending = [*self.target.ahead.sequence(), pending]
        if (ahead := self.target.ahead.ahead_logits(with_pending)) is not None:
            self.target.ahead.end(with_pending)  # keeps that row: no pass
            if not tree.tokens:
                return ahead[None], 0
            if tree.is_chain():
                rows = forward(tree.tokens)
            else:
                mask, depths = tree.attention()
                rows = forward(
                    tree.tokens, tree_mask=mask[1:, 1:], depths=[d - 1 for d in depths[1:]]
                )
            return np.concatenate([ahead[None], rows]), len(tree)
        if not tree.tokens:
            if not self.calibration.pad_single_row:
                return forward([pending]), 1
            return forward([pending, pending])[:1], 1
        tokens = [pending] + tree.tokens
        if tree.is_chain():  # a chain is plain causal attention: no mask needed
            return forward(tokens), len(tokens)
        mask, depths = tree.attention()
        return forward(tokens, tree_mask=mask, depths=depths), len(tokens)


def _rng(params: GenerationParams) -> np.random.Generator | None:
    """The request's random generator when it samples (seeded, or from the clock)."""
    if params.temperature <= 0:
        return None
    return np.random.default_rng(params.seed if params.seed is not None else time.time_ns())
