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

import functools
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch

from ..memory import return_freed_memory
from .attention import use_rowwise_attention
from .draft import DraftProposer
from .kvcache import CachedModel, Cancelled, common_prefix_len, either, timed
from .ngram import NgramProposer
from .policy import SpeculationPolicy, kept_moments
from .tree import TokenTree
from .verify import logits_to_probs, sample, walk_tree

# Given every token generated so far, return how many to keep if generation must stop there
# (syntax-aware rules plug in here), or None to go on. It is also asked about tokens that were
# only proposed (``_Output.horizon``), so it must not act on being called.
StopRule = Callable[[list[int]], "int | None"]
# Seconds of prefill per chunk (by the speed measured at load). Larger chunks prefill faster
# (on a 2-core AVX2 CPU 50 tokens/s in 1 s chunks, 56 in 2 s), and they cost a request little:
# a cancel for a request at the same place lets the chunk finish (the new request needs that
# work), a request elsewhere interrupts it within a layer (see ``generate``).
PREFILL_CHUNK_S = 2.0
# How many of the likeliest next keystrokes ``Engine.look_ahead`` computes in its first pass
# (the rest follow in a second): each row adds ~15-25% of a one-row pass on a 2-core CPU, and
# the user may type before a wide pass ends.
AHEAD_FIRST = 3
# Target passes measured (calibration's four included) before the draft's worth is judged
# again on the running costs (``Engine.reconsider_draft``).
DRAFT_RECHECK_PASSES = 32


@dataclass
class GenerationParams:
    """What one request asks of the engine."""

    max_tokens: int = 64
    temperature: float = 0.0
    seed: int | None = None
    speculate: bool = True  # False: plain decoding, one token per target pass
    use_ngram: bool = True
    use_draft: bool = True  # allowed; the adaptive policy still decides per pass
    context: str = ""  # what kind of completion (e.g. "line"): the policy learns per context


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
    pass_log: list[tuple[int, int, float]] = field(default_factory=list)  # (width, kept, s)
    # each pass that verified proposed tokens: (its main chain's first token's predicted rate,
    # the predicted mean and variance of the chain's tokens kept, the chain's tokens kept)
    bets: list[tuple[float, float, float, int]] = field(default_factory=list)
    dropped_past_stop: int = 0  # tokens accepted in the stopping pass after the stop point
    ahead: bool = False  # the prompt was computed ahead (``Engine.look_ahead``): no prefill pass
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

    def horizon(self, proposal: list[int]) -> int:
        """How many tokens of ``proposal`` (a chain that would follow the generated tokens) are
        worth verifying: those before the first one at which generation would stop. That one
        is not needed either: when everything before it is accepted, the pass's bonus token is
        the target's own choice there, and the stop rules judge it then.

        The rules judge a growing text, and once they stop it they stop every longer one, so
        the first stopping prefix is found by bisection (a few calls of the rule)."""
        for i, token in enumerate(proposal):
            if token in self.stop_ids:
                proposal = proposal[:i]
                break
        if self.rule is None or not proposal or self.rule(self.tokens + proposal) is None:
            return len(proposal)
        lo, hi = 1, len(proposal)  # the rule stops proposal[:hi]
        while lo < hi:
            mid = (lo + hi) // 2
            if self.rule(self.tokens + proposal[:mid]) is None:
                lo = mid + 1
            else:
                hi = mid
        return lo - 1

    def _finish(self, reason: str, dropped: int) -> None:
        self.done = True
        self.stats.stop_reason = reason
        self.stats.dropped_past_stop += dropped


def draft_cost_note(ratio: float) -> str:
    """Why a draft whose step costs ``ratio`` of a target pass is not worth running."""
    return f"a step costs {ratio:.2f} of a target pass here, too much to pay even at 80% acceptance"


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
        self.pad_single_row = True  # until calibrate() has checked that one-row passes are exact
        self.draft_note = ""  # why the draft was released, if it was
        self.draft_step_ratio: float | None = None  # draft step / target pass, when released
        # told the ratio when the draft is released (the daemon remembers it for later starts)
        self.on_draft_released: Callable[[float], None] | None = None
        self.prefill_rate: float | None = None  # prompt tokens per second, measured at load
        # the last request's prompt and the logits after it (what ``look_ahead`` starts from)
        self.prompt_logits: tuple[list[int], torch.Tensor] | None = None
        self.ahead_of: list[int] | None = None  # the prompt the standing look-ahead is for

    def calibrate(self, context_len: int = 16) -> None:
        """Measure at load what the policy and the verifier need to know about this machine:

        * whether a one-row pass computes a position bit-identically to the same row inside a
          wider pass (then plain decoding needs no padding row, see ``_verify``);
        * the cost of target passes of widths 1, 2, 4 and 8, and of a draft step.

        Runs on a short dummy context; both caches are cleared after.
        """
        vocab = self.target.model.config.vocab_size
        ids = [(7 * i + 100) % vocab for i in range(context_len)]
        self.pad_single_row = not _one_row_is_exact(self.target, ids)
        chunk = [(11 * i + 50) % vocab for i in range(64)]
        self.prefill_rate = len(chunk) / _pass_seconds(self.target, ids, chunk)
        self.target.prefill_chunk = max(16, min(256, int(self.prefill_rate * PREFILL_CHUNK_S)))
        for width in (1, 2, 4, 8):
            rows = 2 if width == 1 and self.pad_single_row else width
            self.policy.observe_pass(width, _pass_seconds(self.target, ids, ids[:rows]))
        if self.drafter:
            self.policy.draft_step_s.add(_pass_seconds(self.drafter.model, ids, ids[:1]))
            if self.policy.draft_mode == "auto" and not self.policy.draft_can_pay():
                self.release_draft()

    def release_draft(self) -> None:
        """Drop the draft model (its memory goes with it): on this machine its step costs too
        much of a target pass for it to pay even at a good acceptance rate."""
        ratio = self.policy.draft_step_s.value / self.policy.verify_cost(1)
        self.draft_step_ratio = ratio
        self.draft_note = f"draft released: {draft_cost_note(ratio)}"
        self.drafter = None
        self.policy.draft_enabled = self.policy.draft_on = False
        self.policy.draft_mode = "off"
        if self.on_draft_released is not None:
            self.on_draft_released(ratio)

    def reconsider_draft(self) -> bool:
        """Release the draft if the costs measured in real requests say it cannot pay.

        ``calibrate`` judges the draft on one look at a 16-token context. On a 2-core Xeon at
        20 GB/s that look kept it in both starts tried, and it then ran on none of 577 passes
        while it held 650 MB (the pair at 2.8 GB). Once ``DRAFT_RECHECK_PASSES`` passes have
        been measured, the same test runs on the running costs. Returns whether the draft was
        released now."""
        if self.drafter is None or self.policy.draft_mode != "auto":
            return False
        if self.policy.passes < DRAFT_RECHECK_PASSES or self.policy.draft_can_pay():
            return False
        self.release_draft()
        return_freed_memory(collect=True)
        return True

    def warm(
        self,
        prompt: list[int],
        cancel: threading.Event,
        chunk_s: float = PREFILL_CHUNK_S,
        interrupt: Callable[[], bool] | None = None,
    ) -> int:
        """Prefill ``prompt`` (all but its last token: a request recomputes that one anyway)
        ahead of a request, in chunks of about ``chunk_s`` seconds. It stops between chunks as
        soon as ``cancel`` is set (what was computed stays cached), and between the layers of a
        chunk once ``interrupt()`` is true (that chunk is dropped). Returns tokens computed."""
        if len(prompt) < 2:
            return 0
        ids = prompt[:-1]
        chunk = max(8, int((self.prefill_rate or 256 / chunk_s) * chunk_s))
        with self.lock:
            if self.target.looked_ahead(prompt):
                return 0  # computed ahead, its last id included
            self.target.settle(ids)
            shared = common_prefix_len(self.target.ids, ids)
            if shared == len(ids):
                return 0  # all cached (prefill would recompute the last id for its logits)
            start = min(shared, len(ids) - 1)  # what prefill keeps
            try:
                self.target.prefill(ids, cancel, chunk=chunk, interrupt=interrupt)
            except Cancelled:
                pass
            return max(0, len(self.target.ids) - start)

    def look_ahead(
        self,
        prompt: list[int],
        next_prompts: Callable[[torch.Tensor], list[list[int]]],
        cancel: threading.Event,
        interrupt: Callable[[], bool] | None = None,
    ) -> int:
        """While nobody waits: compute ahead the prompts of the next keystrokes at ``prompt``
        (``next_prompts`` picks them from the logits after ``prompt``, likeliest first) as
        token trees (``CachedModel.look_ahead``), so that a request that comes with one of
        them starts from its logits: its first token costs no pass, nor its second (each
        prompt's greedy next token is computed too). Three passes: the ``AHEAD_FIRST``
        likeliest prompts, the rest, and the next token after each. Returns the rows
        computed.

        Only where a one-row pass computes a row exactly as a wider one does (``calibrate``):
        the rows computed ahead are then the very rows a prefill would compute, and a
        completion is the same whether or not it was looked ahead. ``cancel`` or
        ``interrupt`` stop it between two decoder layers (a pass stopped keeps nothing; the
        passes before it stay)."""
        if self.pad_single_row or len(prompt) < 2:
            return 0
        stop = functools.partial(either, cancel.is_set, interrupt)
        with self.lock:
            if self.ahead_of == prompt and self.target.looked_ahead(prompt):
                return 0  # done already
            memo = self.prompt_logits
            rows = 0
            try:
                if memo is not None and memo[0] == prompt and self._holds(prompt):
                    logits = memo[1]
                else:
                    logits = self.target.prefill(prompt, cancel, interrupt=stop)[0]
                    self.prompt_logits = (list(prompt), logits)
                prompts = [ids for ids in next_prompts(logits) if ids != prompt]
                known = {tuple(prompt): logits}
                # The likeliest in a first, narrower pass (ready sooner for a quick keystroke),
                # the rest in a second, then the target's choice after each (see ``_verify``).
                first, rest = prompts[:AHEAD_FIRST], prompts[AHEAD_FIRST:]
                rows += self.target.look_ahead(first, known, interrupt=stop)
                self.ahead_of = list(prompt)
                if rest:
                    rows += self.target.look_ahead(rest, known, interrupt=stop)
                if choices := self._choices_after(prompts):
                    rows += self.target.look_ahead(choices, known, interrupt=stop)
            except Cancelled:
                pass
            return rows

    def _choices_after(self, prompts: list[list[int]]) -> list[list[int]]:
        """Each of ``prompts`` computed ahead, followed by the target's greedy choice there."""
        out = []
        for ids in prompts:
            logits = self.target.ahead_logits(ids)
            if logits is not None and (token := int(torch.argmax(logits))) not in self.stop_ids:
                out.append([*ids, token])
        return out

    def _holds(self, prompt: list[int]) -> bool:
        """Whether the target's cache holds ``prompt`` (a plain sequence, no look-ahead)."""
        ids = self.target.ids
        return self.target.ahead is None and ids[: len(prompt)] == prompt

    def generate(
        self,
        prompt: list[int],
        params: GenerationParams | None = None,
        cancel: threading.Event | None = None,
        stop_rule: StopRule | None = None,
        interrupt: Callable[[], bool] | None = None,
    ) -> Generation:
        """Start generating; iterate the result to run it (lazily, pass by pass).

        ``cancel`` stops the prefill at the end of a chunk (what it computed stays cached, for
        a request at the same place) and a decoding pass between two layers; ``interrupt()``
        also stops a prefill chunk between two layers (its work is dropped)."""
        params = params or GenerationParams()
        stats = GenerationStats()
        out = _Output(self.stop_ids, params.max_tokens, stop_rule, stats)
        return Generation(self._decode(prompt, params, cancel, out, interrupt), stats, out.tokens)

    # -- the loop -----------------------------------------------------------------------------

    def _decode(self, prompt, params, cancel, out: _Output, interrupt) -> Iterator[list[int]]:
        stats, t0 = out.stats, time.perf_counter()
        rng = None
        if params.temperature > 0:
            rng = torch.Generator(device="cpu")
            rng.manual_seed(params.seed if params.seed is not None else int(time.time_ns()))
        with self.lock:
            self.policy.begin_request(params.context)
            try:
                # 1) Prefill: reuse the cached prefix, compute the new tail, pick the first token.
                logits, stats.cached_tokens, stats.prefill_tokens = self.target.prefill(
                    prompt, cancel, interrupt=interrupt
                )
                stats.ahead = stats.prefill_tokens == 0  # (a prefill computes at least one row)
                self.prompt_logits, self.ahead_of = (list(prompt), logits), None
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
                    tree, evidence, draft_start, draft_s, bet = self._propose(
                        prompt, out, params, rng
                    )
                    # 3) Verify: ONE target pass over [pending] + tree (a cancel stops it
                    # between two layers: its tokens would be thrown away anyway).
                    base = len(self.target.sequence())
                    interrupt = cancel.is_set if cancel is not None else None
                    (logits, rows), seconds = timed(self._verify, pending, tree, interrupt)
                    if rows == 1 + len(tree):  # (a pass whose pending row was computed ahead
                        self.policy.observe_pass(rows, seconds)  # is not a pass of this width)
                    stats.pass_log.append((1 + len(tree), 0, seconds))
                    # 4) Accept: walk the tree with the target's own choices; keep that path.
                    path, bonus = walk_tree(tree, logits, params.temperature, rng)
                    self.target.keep(base + 1, [base + 1 + i for i in path])
                    # 5) Learn: acceptance per proposer, costs, counters.
                    self._learn(tree, path, draft_start, draft_s, evidence, stats)
                    if bet:  # kept: how far the path followed the chain the bet was on
                        chain = tree.main_chain()[: len(bet)]
                        kept = common_prefix_len(path, chain)
                        stats.bets.append((bet[0], *kept_moments(bet), kept))
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

    # -- steps --------------------------------------------------------------------------------

    @staticmethod
    def _choose(logits: torch.Tensor, temperature: float, rng) -> int:
        """The target's own next token: argmax, or a sample at the temperature."""
        if temperature <= 0:
            return int(torch.argmax(logits).item())
        return sample(logits_to_probs(logits, temperature), rng)

    def _propose(
        self, prompt, out: _Output, params, rng
    ) -> tuple[TokenTree, tuple[int, str], int | None, list, list[float]]:
        """Build this pass's token tree, sized by the policy. Returns (tree, the best n-gram
        span's match length and support, node the draft grew from or None, draft step
        times, the predicted rates of the main chain's tokens it verifies)."""
        context = prompt + out.tokens
        remaining = params.max_tokens - len(out.tokens)
        tree = TokenTree()
        # A pass emits at most depth + 1 tokens: never propose past the token limit.
        cap = min(self.policy.max_nodes_limit, remaining - 1)
        if not params.speculate or cap <= 0:
            return tree, (0, ""), None, [], []
        offers = self.ngram.propose(context, cap) if params.use_ngram else []
        for candidate in offers:
            tree.add(candidate, cap)
        evidence = (offers[0].evidence, offers[0].support) if offers else (0, "")
        first_rate, then_rate = ngram_rates = self.policy.ngram_rates(*evidence)
        draft_start, draft_s = self._draft(tree, context, cap, remaining, params, rng, ngram_rates)
        # Verify the k* first tokens of the main chain that pay (policy.py), plus what fits
        # beside them in the same width bucket at no extra cost.
        chain = tree.main_chain()
        rates = [
            (first_rate if depth == 0 else then_rate)
            if "ngram" in tree.sources[i]
            else self.policy.draft.rate
            for depth, i in enumerate(chain)
        ]
        # ... and none past where the stop rules would end generation (wasted width).
        k = min(self.policy.chain_length(rates), out.horizon([tree.tokens[i] for i in chain]))
        width = self.policy.width(k, len(tree))
        keep = chain[:k] + [i for i in range(len(tree)) if i not in chain][: max(0, width - k)]
        keep = [i for i in keep if all(p in keep for p in tree.path_to(i)[:-1])]
        tree, index = tree.subset(keep)
        if draft_start is not None:
            draft_start = index.get(draft_start) if draft_start >= 0 else -1
        return tree, evidence, draft_start, draft_s, rates[:k]

    def _draft(self, tree, context, cap, remaining, params, rng, ngram_rates):
        """Let the draft continue the best n-gram span (or start at the root) when the policy
        says it pays. Returns (node it grew from, its step times), (None, []) when it did not
        run. It grows from a leaf, so its sampled tokens never share a node with a
        deterministic proposal."""
        if not (self.drafter and params.use_draft):
            return None, []
        ngram_chain = [i for i in tree.main_chain() if "ngram" in tree.sources[i]]
        lag = len(context) - common_prefix_len(self.drafter.model.ids, context)
        plan = self.policy.plan(len(ngram_chain), lag, ngram_rates)
        if not plan.use_draft:
            return None, []
        start = ngram_chain[-1] if ngram_chain else -1
        room = min(plan.draft_len, cap - len(tree), remaining - 1 - tree_depth(tree, start))
        if room <= 0:
            return None, []
        prefix = [tree.tokens[i] for i in tree.path_to(start)]
        for candidate in self.drafter.propose(context + prefix, room, params.temperature, rng):
            tree.add(candidate, cap, under=start)
        return start, self.drafter.last_step_s

    def _verify(
        self, pending: int, tree: TokenTree, interrupt: Callable[[], bool] | None = None
    ) -> tuple[torch.Tensor, int]:
        """Logits at [pending] + every node, from one target forward pass (``interrupt``: see
        ``CachedModel.forward``), and the rows that pass computed.

        Where a one-row pass rounds differently from wider ones (dense bf16 GEMMs on some CPUs;
        ``calibrate`` checks), a lone pending token gets a padding row after it, whose logits
        are ignored and whose cache entry ``keep`` drops: plain decoding (one token per pass)
        then stays bit-identical to verification (see ``attention.py``). Where one-row passes
        are exact anyway (the int4/int8 kernels compute each row alone), no padding is paid.

        Where the pending token's row was computed ahead (``look_ahead``: the target's choice
        after a prompt it computed ahead), its logits come from there and the pass computes
        the nodes only: each row's numbers are its own, so they are the same bits.
        """
        forward = functools.partial(self.target.forward, interrupt=interrupt)
        with_pending = [*self.target.sequence(), pending]
        if (ahead := self.target.ahead_logits(with_pending)) is not None:
            self.target.settle(with_pending)  # keeps that row: no pass
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
            if not self.pad_single_row:
                return forward([pending]), 1
            return forward([pending, pending])[:1], 1
        tokens = [pending] + tree.tokens
        if tree.is_chain():  # a chain is plain causal attention: no mask needed
            return forward(tokens), len(tokens)
        mask, depths = tree.attention()
        return forward(tokens, tree_mask=mask, depths=depths), len(tokens)

    def _learn(self, tree, path, draft_start, draft_s, evidence, stats: GenerationStats) -> None:
        stats.target_passes += 1
        stats.accepted_per_pass.append(len(path))
        stats.pass_log[-1] = (stats.pass_log[-1][0], len(path), stats.pass_log[-1][2])
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
            length, support = evidence
            self.policy.observe_ngram(length, len(first_branch), taken, support)
        if draft_start is not None:
            stats.draft_passes += 1
            stats.draft_forwards += self.drafter.last_forwards if self.drafter else 0
            draft_nodes = [i for i, s in enumerate(tree.sources) if "draft" in s]
            reached = draft_start < 0 or draft_start in kept
            # Tokens the target never got to judge (the path broke off earlier) are not evidence.
            proposed = len(draft_nodes) if reached else 0
            taken = sum(1 for i in draft_nodes if i in kept) if reached else 0
            self.policy.observe_draft(draft_s, proposed, taken)


def _pass_seconds(model: CachedModel, ids: list[int], tokens: list[int], repeats: int = 3) -> float:
    """Median seconds for one pass over ``tokens`` after ``ids`` (after a first pass that pays
    set-up costs)."""
    model.prefill(ids)
    times = []
    for _ in range(repeats + 1):
        _, seconds = timed(model.forward, tokens, all_logits=False)
        model.crop(len(ids))
        times.append(seconds)
    model.reset()
    return sorted(times[1:])[repeats // 2]


def _one_row_is_exact(model: CachedModel, ids: list[int]) -> bool:
    """Whether a one-row pass gives a position exactly the logits it gets as the first row of
    2- and 3-row passes (the kernels then compute every row on its own)."""
    model.prefill(ids)
    rows = []
    for width in (1, 2, 3):
        rows.append(model.forward(ids[:width])[0])
        model.crop(len(ids))
    model.reset()
    return all(torch.equal(rows[0], r) for r in rows[1:])


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
