"""What a request asks of a generator and what it gets back: params, stats, the stop rules.

These are the words of the generator seam (``generator.py``): the local engine (``loop.py``)
and a remote one speak them alike, so completion, server and stats never see which ran.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .proposers import SOURCES

if TYPE_CHECKING:
    from .corpus import TokenCorpus


# Given every token generated so far, return how many to keep if generation must stop there
# (syntax-aware rules plug in here), or None to go on. It is also asked about tokens that were
# only proposed (``Output.horizon``), so it must not act on being called.
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
    context: str = ""  # what kind of completion (e.g. "line"): the policy learns per context
    # token corpora to draft from besides the prompt (``corpus.py``: the workspace's files, the
    # user's accepted completions); a generator without lookup ignores them
    corpora: tuple[TokenCorpus, ...] = ()
    # prompt[start:end] is not text before the cursor (a FIM prompt's suffix and its markers):
    # corpus lookup leaves it out, so the text before the cursor runs on into what is generated
    not_before_cursor: tuple[int, int] | None = None
    # the token ids of a text the output rewrites (a next edit's window): its own draft
    # (``rewrite.py``); empty: not a rewrite
    rewrite_of: tuple[int, ...] = ()
    # keep the target's probability of each token it emits (``GenerationStats.chosen_p``):
    # what a next edit's confidence is read from; a softmax a token, so only when asked
    keep_probabilities: bool = False


@dataclass
class GenerationStats:
    """Per-request counters."""

    tokens: int = 0
    target_passes: int = 0  # decode passes (prefill not included)
    prefill_tokens: int = 0  # prompt tokens computed
    cached_tokens: int = 0  # prompt tokens reused from the KV cache
    proposed: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SOURCES, 0))
    accepted: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SOURCES, 0))
    draft_passes: int = 0  # target passes for which the draft model ran
    draft_forwards: int = 0
    accepted_per_pass: list[int] = field(default_factory=list)  # histogram source
    pass_log: list[tuple[int, int, float]] = field(default_factory=list)  # (width, kept, s)
    # each pass that verified proposed tokens: (its main chain's first token's predicted rate,
    # the predicted mean and variance of the chain's tokens kept, the chain's tokens kept)
    bets: list[tuple[float, float, float, int]] = field(default_factory=list)
    dropped_past_stop: int = 0  # tokens accepted in the stopping pass after the stop point
    threads: int = 0  # the threads its passes ran on (fewer where other processes took cores)
    ahead: bool = False  # the prompt was computed ahead (``Engine.look_ahead``): no prefill pass
    ttft_s: float = 0.0
    prefill_s: float = 0.0
    total_s: float = 0.0
    stop_reason: str = ""  # eos | max_tokens | stop_rule | cancelled
    # with ``keep_probabilities``: the target's probability of each emitted token, in order
    # (it may run past the output where a stop rule cut the last pass's tokens)
    chosen_p: list[float] = field(default_factory=list)

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


class Output:
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
