"""The decode loop, the policy, cancellation and look-ahead on a backend with scripted logits
(``tests/fake_backend.py``): milliseconds, no model. The keystones on tiny real models
(``test_engine.py``, ``test_lookahead.py``) and the embedded pair stay as they are; these pin
the loop's own logic where nothing else can move the result: what it emits must be the script.
"""

from __future__ import annotations

import pytest
from fake_backend import FakeBackend, greedy, next_token

from codespec.engine import Engine, GenerationParams, SpeculationPolicy, StopSignal
from codespec.engine import proposal as proposing
from codespec.engine.ngram import NgramProposer
from codespec.engine.proposers import NGRAM, Sampling
from codespec.engine.request import GenerationStats, Output

# A prompt the script itself wrote: its period (the Fibonacci numbers modulo 16 repeat every 24)
# shows twice, so prompt lookup predicts what comes next.
PROMPT = [1, 1] + greedy([1, 1], 60)
# A prompt whose own history misleads prompt lookup: "5 6" was followed by "0 2 9" twice, but
# the script continues it with 11.
MISLEADING = [5, 6, 0, 2, 9, 5, 6, 0, 2, 9, 5, 6]


def engine(draft_mode: str | None = None) -> Engine:
    """An engine on the fake, calibrated; with a fake draft in ``draft_mode`` if given."""
    policy = SpeculationPolicy(draft_mode=draft_mode or "off")
    draft = FakeBackend() if draft_mode else None
    e = Engine(FakeBackend(), draft, policy=policy, free_threads=lambda: 1)
    e.calibrate()
    return e


def run(e: Engine, prompt: list[int], **params) -> tuple[list[int], GenerationStats]:
    generation = e.generate(prompt, GenerationParams(**params))
    for _ in generation:
        pass
    return generation.tokens, generation.stats


@pytest.mark.parametrize("speculate", [False, True])
@pytest.mark.parametrize("prompt", [PROMPT, MISLEADING], ids=["repeating", "misleading"])
def test_the_loop_emits_the_scripts_greedy_tokens(speculate, prompt):
    tokens, stats = run(engine(), prompt, max_tokens=40, speculate=speculate)
    assert tokens == greedy(prompt, 40)
    assert stats.stop_reason == "max_tokens" and stats.tokens == 40


def test_wrong_proposals_are_rejected_by_the_target():
    tokens, stats = run(engine(), MISLEADING, max_tokens=12)
    assert tokens == greedy(MISLEADING, 12)
    assert stats.proposed[NGRAM] > stats.accepted[NGRAM]  # (the lookup was wrong, and tried)


def test_speculation_verifies_several_tokens_a_pass_where_lookup_is_right():
    e = engine()
    plain_tokens, plain = run(e, PROMPT, max_tokens=40, speculate=False)
    spec_tokens, spec = run(e, PROMPT, max_tokens=40)
    assert spec_tokens == plain_tokens
    assert plain.target_passes == 39  # one token a pass (the first from the prefill)
    assert spec.target_passes < plain.target_passes / 2
    assert spec.accepted[NGRAM] > 20 and spec.accepted[NGRAM] <= spec.proposed[NGRAM]


def test_a_prompt_with_nothing_to_look_up_costs_no_wider_passes():
    e = engine()
    prompt = [3, 9]  # a fresh start: nothing in it repeats yet
    tokens, stats = run(e, prompt, max_tokens=6)
    assert tokens == greedy(prompt, 6)
    assert stats.proposed[NGRAM] <= 2  # the recurrence has not come round: no span to offer


def test_the_draft_proposes_and_output_stays_the_script():
    e = engine(draft_mode="on")  # drafted every pass, whatever the prices say
    tokens, stats = run(e, [7, 2], max_tokens=20, use_ngram=False)
    assert tokens == greedy([7, 2], 20)
    assert stats.draft_passes > 0 and stats.accepted["draft"] > 0


def test_a_cancelled_request_stops_within_a_pass_and_leaves_a_usable_cache():
    e = engine()

    class StopAfter(StopSignal):
        """Cancelled once the target has run ``passes`` passes."""

        def __init__(self, target: FakeBackend, passes: int) -> None:
            super().__init__()
            self.target, self.at = target, target.forward_calls + passes

        def stops_pass(self, prefill_rows: int | None = None) -> bool:
            if self.target.forward_calls >= self.at:
                self.cancel()
            return super().stops_pass(prefill_rows)

    target = e.target
    assert isinstance(target, FakeBackend)
    params = GenerationParams(max_tokens=40, speculate=False)
    generation = e.generate(PROMPT, params, StopAfter(target, 5))
    for _ in generation:
        pass
    assert generation.stats.stop_reason == "cancelled"
    assert 0 < len(generation.tokens) < 40
    assert generation.tokens == greedy(PROMPT, len(generation.tokens))
    assert run(e, PROMPT, max_tokens=12)[0] == greedy(PROMPT, 12)  # the cache is sound after


def test_a_prompt_computed_ahead_needs_no_prefill_and_gives_the_same_tokens():
    e = engine()
    e.calibration.pad_single_row = False  # (the fake's rows are exact at any width)
    run(e, PROMPT, max_tokens=2)
    typed = PROMPT + [next_token(PROMPT)]  # the user types what the model would

    def next_prompts(logits) -> list[list[int]]:
        return [PROMPT + [t] for t in range(16)]

    rows = e.look_ahead(PROMPT, next_prompts, StopSignal())
    assert rows > 0 and e.target.ahead.looked_ahead(typed)
    tokens, stats = run(e, typed, max_tokens=8)
    assert stats.ahead and stats.prefill_tokens == 0
    assert tokens == greedy(typed, 8)
    assert not e.target.ahead.looked_ahead(typed)  # (the look-ahead ended with the request)


def policy_with_prices(per_row_s: float) -> SpeculationPolicy:
    """A policy whose pass prices are set: a pass of w rows costs 1 + per_row_s * (w - 1)."""
    policy = SpeculationPolicy()
    for width in (1, 2, 4, 8, 16, 24):
        for _ in range(8):
            policy.costs.observe_pass(width, 1.0 + per_row_s * (width - 1))
    return policy


@pytest.mark.parametrize(
    ("per_row_s", "verified"),
    [(0.0, "the whole span"), (5.0, "nothing")],
)
def test_the_policy_verifies_what_pays_at_the_prices_it_measured(per_row_s, verified):
    """The same offer under two price curves: with wide passes free the whole span is verified;
    with each row dearer than a pass, none of it (plain decoding is cheaper)."""
    policy = policy_with_prices(per_row_s)
    ngram = NgramProposer()
    ngram.begin(GenerationParams())
    out = Output(set(), 40, None, GenerationStats())
    proposal = proposing.build(
        policy, 24, [ngram], PROMPT, out, GenerationParams(max_tokens=40), Sampling()
    )
    offered = len(ngram.propose(PROMPT, 24).candidates[0].tokens)
    chain = proposal.tree.main_chain()
    if verified == "the whole span":
        assert len(chain) == offered > 1
    else:
        assert len(proposal.tree) == 0


def test_a_slowed_generator_emits_the_same_tokens_each_run_later():
    """``serve --test-pass-delay``'s wrapper: the same tokens and stats, each run of accepted
    tokens ``delay_s`` late (so the whole takes at least a delay per run)."""
    import time

    from codespec.generator import SlowedGenerator

    e = engine()
    expected, _ = run(e, PROMPT, max_tokens=12, speculate=False)
    slowed = SlowedGenerator(e, 0.05)
    assert slowed.label == e.label and slowed.warming is e.warming
    started = time.perf_counter()
    generation = slowed.generate(PROMPT, GenerationParams(max_tokens=12, speculate=False))
    runs = sum(1 for _ in generation)
    took = time.perf_counter() - started
    assert generation.tokens == expected and generation.stats.tokens == 12
    assert runs >= 2 and took >= 0.05 * runs
