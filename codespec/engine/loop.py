"""The decode loop: propose -> verify in one target pass -> accept -> learn -> stop -> yield.

The engine knows nothing about text: it turns a prompt (token ids) into generated token ids.
One call of ``Engine.generate`` returns a ``Generation``, an iterator over the tokens accepted by
each target pass (for streaming), whose ``stats`` hold the per-request counters.

State between target passes::

    target cache = prompt + generated[:-1]        the last generated token is *pending*:
    pending      = generated[-1]                  chosen by the target, not yet in its cache

Each pass reads ``[pending] + tree nodes``; the logits at the pending token and at every node
say what the target would choose next there, so one pass confirms a whole accepted path plus
one bonus token of the target's own. Plain decoding (``speculate=False``) is the same loop with
an empty tree: one token per pass, same kernels, same cache. That is what "greedy output is
token-identical to plain decoding" is tested against.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch

from .attention import use_rowwise_attention
from .draft import DraftProposer
from .kvcache import CachedModel, Cancelled, common_prefix_len, timed
from .ngram import NgramProposer
from .policy import SpeculationPolicy
from .tree import TokenTree
from .verify import logits_to_probs, sample, walk_tree

# Given every token generated so far, return how many to keep if generation must stop there
# (syntax-aware rules plug in here), or None to go on.
StopRule = Callable[[list[int]], "int | None"]


@dataclass
class GenerationParams:
    """What one request asks of the engine."""

    max_tokens: int = 64
    temperature: float = 0.0
    seed: int | None = None
    speculate: bool = True  # False: plain decoding, one token per target pass
    use_ngram: bool = True
    use_draft: bool = True  # allowed; the adaptive policy still decides per pass


@dataclass
class GenerationStats:
    """Per-request counters."""

    tokens: int = 0
    target_passes: int = 0  # decode passes (prefill not included)
    prefill_tokens: int = 0  # prompt tokens computed
    cached_tokens: int = 0  # prompt tokens reused from the KV cache
    proposed: dict[str, int] = field(default_factory=lambda: {"ngram": 0, "draft": 0})
    accepted: dict[str, int] = field(default_factory=lambda: {"ngram": 0, "draft": 0})
    draft_passes: int = 0  # target passes for which the draft model ran
    draft_forwards: int = 0
    accepted_per_pass: list[int] = field(default_factory=list)  # histogram source
    dropped_past_stop: int = 0  # tokens accepted in the stopping pass after the stop point
    ttft_s: float = 0.0
    prefill_s: float = 0.0
    total_s: float = 0.0
    stop_reason: str = ""  # eos | max_tokens | stop_rule | cancelled

    @property
    def tokens_per_pass(self) -> float:
        """Generated tokens per decode pass, counting the first token's prefill as a pass."""
        return self.tokens / max(self.target_passes + 1, 1)


class Generation:
    """Iterator over newly accepted token lists; ``tokens`` and ``stats`` fill in as it runs."""

    def __init__(self, steps: Iterator[list[int]], stats: GenerationStats, tokens: list[int]):
        self._steps = steps
        self.stats = stats
        self.tokens = tokens

    def __iter__(self) -> Iterator[list[int]]:
        return self._steps

    def run(self) -> list[int]:
        """Drain the generation and return all generated tokens."""
        for _ in self._steps:
            pass
        return self.tokens


class _Output:
    """Generated tokens plus the stop rules: stop tokens, the token limit, the stop hook."""

    def __init__(self, stop_ids: set[int], max_tokens: int, rule: StopRule | None, stats):
        self.tokens: list[int] = []
        self.stop_ids = stop_ids
        self.max_tokens = max_tokens
        self.rule = rule
        self.stats = stats
        self.done = False

    def push(self, new: list[int]) -> list[int]:
        """Append what a pass accepted; return the part that survives the stop rules."""
        start = len(self.tokens)
        for i, token in enumerate(new):
            if token in self.stop_ids:
                self._finish("eos", dropped=len(new) - i - 1)
                break
            self.tokens.append(token)
            if len(self.tokens) >= self.max_tokens:
                self._finish("max_tokens", dropped=len(new) - i - 1)
                break
        if self.rule is not None and len(self.tokens) > start:
            keep = self.rule(self.tokens)
            if keep is not None:
                keep = max(0, min(keep, len(self.tokens)))
                self.stats.dropped_past_stop += len(self.tokens) - keep
                del self.tokens[keep:]
                self.done, self.stats.stop_reason = True, "stop_rule"
        fresh = self.tokens[start:]
        self.stats.tokens = len(self.tokens)
        return fresh

    def _finish(self, reason: str, dropped: int) -> None:
        self.done = True
        self.stats.stop_reason = reason
        self.stats.dropped_past_stop += dropped


class Engine:
    """A resident target model, optional draft, and the speculative decode loop."""

    def __init__(
        self,
        target: CachedModel,
        draft: CachedModel | None = None,
        stop_ids: set[int] | None = None,
        policy: SpeculationPolicy | None = None,
        ngram: NgramProposer | None = None,
        draft_threshold: float = 0.6,
    ) -> None:
        self.target = target
        use_rowwise_attention(target.model)  # logits of a position independent of pass width
        self.stop_ids = set(stop_ids or ())
        self.ngram = ngram or NgramProposer()
        self.drafter = DraftProposer(draft, threshold=draft_threshold) if draft else None
        self.policy = policy or SpeculationPolicy(draft_mode="auto" if draft else "off")
        self.lock = threading.Lock()  # one generation at a time owns the caches

    def calibrate(self, context_len: int = 16) -> None:
        """Seed the policy with measured costs: a one-token target pass and a draft step.

        Runs on a short dummy context (about four target steps); both caches are cleared after.
        """
        ids = [(7 * i) % 1000 + 100 for i in range(context_len)]
        # the target's one-token passes are padded to two rows, as ``_verify`` runs them
        self.policy.observe_pass(1, _one_step_seconds(self.target, ids, rows=2))
        if self.drafter:
            self.policy.draft_step_s.add(_one_step_seconds(self.drafter.model, ids))

    def generate(
        self,
        prompt: list[int],
        params: GenerationParams | None = None,
        cancel: threading.Event | None = None,
        stop_rule: StopRule | None = None,
    ) -> Generation:
        """Start generating; iterate the result to run it (lazily, pass by pass)."""
        params = params or GenerationParams()
        stats = GenerationStats()
        out = _Output(self.stop_ids, params.max_tokens, stop_rule, stats)
        return Generation(self._decode(prompt, params, cancel, out), stats, out.tokens)

    # -- the loop -----------------------------------------------------------------------------

    def _decode(self, prompt, params, cancel, out: _Output) -> Iterator[list[int]]:
        stats, t0 = out.stats, time.perf_counter()
        rng = None
        if params.temperature > 0:
            rng = torch.Generator(device="cpu")
            rng.manual_seed(params.seed if params.seed is not None else int(time.time_ns()))
        with self.lock:
            try:
                # 1) Prefill: reuse the cached prefix, compute the new tail, pick the first token.
                logits, stats.cached_tokens, stats.prefill_tokens = self.target.prefill(
                    prompt, cancel
                )
                stats.prefill_s = time.perf_counter() - t0
                pending = self._choose(logits, params.temperature, rng)
                first = out.push([pending])
                stats.ttft_s = time.perf_counter() - t0
                if first:
                    yield first
                while not out.done:
                    if cancel is not None and cancel.is_set():
                        raise Cancelled()
                    # 2) Propose: n-gram spans and/or a draft chain, merged into one tree.
                    context = prompt + out.tokens
                    remaining = params.max_tokens - len(out.tokens)
                    tree, draft_start, draft_s = self._propose(context, remaining, params, rng)
                    # 3) Verify: ONE target pass over [pending] + tree.
                    base = len(self.target.ids)
                    logits, seconds = timed(self._verify, pending, tree)
                    self.policy.observe_pass(1 + len(tree), seconds)
                    # 4) Accept: walk the tree with the target's own choices; keep that path.
                    path, bonus = walk_tree(tree, logits, params.temperature, rng)
                    self.target.keep(base + 1, [base + 1 + i for i in path])
                    # 5) Learn: acceptance per proposer, costs, counters.
                    self._learn(tree, path, draft_start, draft_s, stats)
                    # 6) Emit the accepted tokens and the bonus; stop rules may cut them.
                    pending = bonus
                    fresh = out.push([tree.tokens[i] for i in path] + [bonus])
                    if fresh:
                        yield fresh
            except Cancelled:
                out.done, stats.stop_reason = True, "cancelled"
            finally:
                stats.total_s = time.perf_counter() - t0

    # -- steps --------------------------------------------------------------------------------

    @staticmethod
    def _choose(logits: torch.Tensor, temperature: float, rng) -> int:
        """The target's own next token: argmax, or a sample at the temperature."""
        if temperature <= 0:
            return int(torch.argmax(logits).item())
        return sample(logits_to_probs(logits, temperature), rng)

    def _propose(self, context, remaining, params, rng) -> tuple[TokenTree, int | None, list]:
        """Build this pass's token tree. Returns (tree, node the draft grew from, draft times)."""
        tree = TokenTree()
        # A pass emits at most depth + 1 tokens: never propose past the token limit.
        budget = min(self.policy.width_budget(), remaining - 1)
        if not params.speculate or budget <= 0:
            return tree, None, []
        best_end = -1
        if params.use_ngram:
            for rank, candidate in enumerate(self.ngram.propose(context, budget)):
                end = tree.add(candidate, budget)
                if rank == 0:
                    best_end = end
        ngram_depth = tree.depths[best_end] if best_end >= 0 else 0
        lag = (
            len(context) - common_prefix_len(self.drafter.model.ids, context) if self.drafter else 0
        )
        plan = self.policy.plan(ngram_depth, lag)
        if not (self.drafter and params.use_draft and plan.use_draft):
            return tree, None, []
        # The draft continues from the end of the best n-gram span (or from the root), at a
        # leaf, so its sampled tokens never share a node with a deterministic proposal.
        start = best_end
        while tree.children(start):
            start = tree.children(start)[0]
        room = min(plan.draft_len, budget - len(tree), remaining - 1 - tree_depth(tree, start))
        if room <= 0:
            return tree, None, []
        prefix = [tree.tokens[i] for i in tree.path_to(start)]
        candidates = self.drafter.propose(context + prefix, room, params.temperature, rng)
        for candidate in candidates:
            tree.add(candidate, budget, under=start)
        return tree, start, self.drafter.last_step_s

    def _verify(self, pending: int, tree: TokenTree) -> torch.Tensor:
        """Logits at [pending] + every node, from one target forward pass.

        A pass is never one token wide: a lone pending token gets a padding row after it, whose
        logits are ignored and whose cache entry ``keep`` drops. One-row GEMMs round
        differently from wider ones, so without it plain decoding (one token per pass) would
        not be bit-identical to verification in bf16 (see ``attention.py``).
        """
        if not tree.tokens:
            return self.target.forward([pending, pending])[:1]
        tokens = [pending] + tree.tokens
        if tree.is_chain():  # a chain is plain causal attention: no mask needed
            return self.target.forward(tokens)
        mask, depths = tree.attention()
        return self.target.forward(tokens, tree_mask=mask, depths=depths)

    def _learn(self, tree, path, draft_start, draft_s, stats: GenerationStats) -> None:
        stats.target_passes += 1
        stats.accepted_per_pass.append(len(path))
        kept = set(path)
        for source in ("ngram", "draft"):
            nodes = [i for i, s in enumerate(tree.sources) if source in s]
            stats.proposed[source] += len(nodes)
            stats.accepted[source] += sum(1 for i in nodes if i in kept)
        # n-gram: judge the best branch (the first child chain) by how far the path followed it.
        first_branch = _first_chain(tree, "ngram")
        if first_branch:
            taken = sum(1 for i in first_branch if i in kept)
            self.ngram.update(len(first_branch), taken)
            self.policy.observe_ngram(len(first_branch), taken)
        if draft_start is not None:
            stats.draft_passes += 1
            stats.draft_forwards += self.drafter.last_forwards if self.drafter else 0
            draft_nodes = [i for i, s in enumerate(tree.sources) if "draft" in s]
            reached = draft_start < 0 or draft_start in kept
            # Tokens the target never got to judge (the path broke off earlier) are not evidence.
            proposed = len(draft_nodes) if reached else 0
            taken = sum(1 for i in draft_nodes if i in kept) if reached else 0
            self.policy.observe_draft(draft_s, proposed, taken)


def _one_step_seconds(model: CachedModel, ids: list[int], rows: int = 1) -> float:
    """Seconds for a one-token pass of ``rows`` rows after ``ids`` (second try: the first pays
    set-up costs)."""
    model.prefill(ids)
    for _ in range(2):
        _, seconds = timed(model.forward, [ids[0]] * rows, all_logits=False)
        model.crop(len(ids))
    model.reset()
    return seconds


def tree_depth(tree: TokenTree, node: int) -> int:
    """Depth of ``node`` (0 for the root)."""
    return tree.depths[node] if node >= 0 else 0


def _first_chain(tree: TokenTree, source: str) -> list[int]:
    """Nodes along the first-child chain from the root that carry ``source``."""
    chain, node = [], -1
    while True:
        kids = [k for k in tree.children(node) if source in tree.sources[k]]
        if not kids:
            return chain
        node = kids[0]
        chain.append(node)
