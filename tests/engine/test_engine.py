"""The keystone: speculative decoding is token-identical to plain greedy decoding.

Tiny random Qwen2 models (built in conftest) stand in for the real pair; the naive reference
recomputes the whole sequence every step without any cache.
"""

import pytest
import torch
from helpers import CancelAfter, PreemptAfter, naive_greedy, tiny_qwen2

from codespec.engine import Engine, GenerationParams, NgramProposer, StopSignal
from codespec.engine.policy import SpeculationPolicy
from codespec.engine.proposers import SOURCES
from codespec.torch_backend.kvcache import CachedModel

PROMPTS = [
    [5, 6, 7, 8, 9, 10, 5, 6, 7, 8, 11, 12, 13, 5, 6],
    [1, 2, 3, 4, 1, 2, 3, 4, 1, 2],
    [40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50],
]


def make_engine(target, draft=None, draft_mode="auto", branches=3, threshold=0.0, stop_ids=()):
    return Engine(
        CachedModel(target, prefill_chunk=8),
        CachedModel(draft) if draft is not None else None,
        stop_ids=set(stop_ids),
        policy=SpeculationPolicy(draft_mode=draft_mode if draft is not None else "off"),
        ngram=NgramProposer(min_ngram=1, branches=branches),
        draft_threshold=threshold,
    )


MIXES = {
    "plain": dict(speculate=False),
    "ngram": dict(use_draft=False),
    "draft-good": dict(use_ngram=False, draft="same"),
    "draft-bad": dict(use_ngram=False, draft="other"),
    "ngram+draft": dict(draft="other"),
    "ngram+draft-good": dict(draft="same"),
}


@pytest.mark.parametrize("mix", MIXES)
@pytest.mark.parametrize("prompt", PROMPTS)
def test_speculative_equals_naive_greedy(target_model, other_model, mix, prompt):
    options = dict(MIXES[mix])
    which = options.pop("draft", None)
    draft = {"same": target_model, "other": other_model, None: None}[which]
    engine = make_engine(target_model, draft, draft_mode="on")
    generation = engine.generate(prompt, GenerationParams(max_tokens=48, **options))
    assert generation.run() == naive_greedy(target_model, prompt, 48)
    stats = generation.stats
    assert stats.tokens == 48 and stats.stop_reason == "max_tokens"
    if mix == "plain":
        assert stats.target_passes == 47
        assert stats.proposed == dict.fromkeys(SOURCES, 0)
    if mix == "draft-good":  # the target drafting for itself is always right
        assert stats.accepted["draft"] == stats.proposed["draft"] > 0
        assert stats.target_passes < 47


def test_tree_verification_with_competing_branches(target_model):
    """Several n-gram continuations at once: one pass verifies them all, output unchanged."""
    prompt = [5, 6, 1, 2, 5, 6, 3, 4, 5, 6, 7, 8, 5, 6]
    engine = make_engine(target_model, branches=4)
    generation = engine.generate(prompt, GenerationParams(max_tokens=40, use_draft=False))
    assert generation.run() == naive_greedy(target_model, prompt, 40)


def test_requests_in_a_row_reuse_the_cache_and_stay_exact(target_model, other_model):
    engine = make_engine(target_model, other_model)
    prompt = PROMPTS[0]
    first = engine.generate(prompt, GenerationParams(max_tokens=20))
    first.run()
    longer = prompt + first.tokens[:5]  # the user accepted five tokens and asks again
    second = engine.generate(longer, GenerationParams(max_tokens=20))
    assert second.run() == naive_greedy(target_model, longer, 20)
    assert second.stats.cached_tokens == len(longer) - 1
    assert second.stats.prefill_tokens == 1


def test_stop_token_ends_generation(target_model):
    prompt = PROMPTS[0]
    reference = naive_greedy(target_model, prompt, 48)
    stop = reference[10]
    engine = make_engine(target_model, stop_ids={stop})
    generation = engine.generate(prompt, GenerationParams(max_tokens=48))
    assert generation.run() == reference[: reference.index(stop)]
    assert generation.stats.stop_reason == "eos"


def test_stop_rule_inside_an_accepted_span(target_model):
    """A stop that needs a token of look-ahead (as a line rule judging a line once the next
    one starts) drops what the stopping pass accepted after the stop point."""
    prompt = PROMPTS[1]
    reference = naive_greedy(target_model, prompt, 48)
    engine = make_engine(target_model, target_model, draft_mode="on")

    def seven_once_eight_are_seen(tokens):
        return 7 if len(tokens) >= 8 else None

    generation = engine.generate(
        prompt, GenerationParams(max_tokens=48), stop_rule=seven_once_eight_are_seen
    )
    assert generation.run() == reference[:7]
    stats = generation.stats
    assert stats.stop_reason == "stop_rule"
    assert stats.dropped_past_stop == 1  # the eighth, which the rule needed to see


@pytest.mark.parametrize("stop_at", [1, 2, 5, 7, 13])
def test_nothing_past_the_stop_is_verified(target_model, stop_at):
    """The drafter (the target itself: always right) would propose long chains; a pass never
    verifies a token past where the stop rule ends generation, nor the one it stops at (the
    bonus token supplies it)."""
    prompt = PROMPTS[1]
    reference = naive_greedy(target_model, prompt, 48)
    engine = make_engine(target_model, target_model, draft_mode="on")
    calls = []

    def stop_rule(tokens):
        calls.append(len(tokens))
        return stop_at if len(tokens) >= stop_at else None

    generation = engine.generate(prompt, GenerationParams(max_tokens=48), stop_rule=stop_rule)
    assert generation.run() == reference[:stop_at]
    stats = generation.stats
    assert stats.dropped_past_stop == 0 and stats.tokens == stop_at
    generated = 1  # the prefill's token
    for width, kept, _ in stats.pass_log:
        assert width - 1 <= max(0, stop_at - generated - 1)  # proposed nodes
        generated += kept + 1
    assert stats.target_passes <= max(1, stop_at - 1)  # at least one node per pass paid off
    assert len(calls) < 8 * (stats.target_passes + 1)  # a few rule calls per pass


def test_streaming_yields_every_token_once(target_model):
    engine = make_engine(target_model)
    generation = engine.generate(PROMPTS[0], GenerationParams(max_tokens=30))
    streamed = [t for chunk in generation for t in chunk]
    assert streamed == generation.tokens == naive_greedy(target_model, PROMPTS[0], 30)


def test_cancel_stops_before_the_next_target_pass(target_model):
    engine = make_engine(target_model)
    stop = StopSignal()
    generation = engine.generate(PROMPTS[2], GenerationParams(max_tokens=48, speculate=False), stop)
    chunks = iter(generation)
    next(chunks)  # first token (from prefill)
    next(chunks)  # one decode pass
    passes = generation.stats.target_passes
    stop.cancel()
    assert list(chunks) == []
    assert generation.stats.stop_reason == "cancelled"
    assert generation.stats.target_passes == passes


def test_sampling_keeps_the_target_distribution():
    """Speculative sampling with a (different) draft: the first generated tokens follow the
    target's distribution (chi-squared against the exact probabilities, tiny vocab)."""
    vocab = 8
    target = tiny_qwen2(seed=3, vocab=vocab, hidden=32)
    draft = tiny_qwen2(seed=4, vocab=vocab, hidden=32)
    prompt = [1, 2, 3, 1, 2]
    # Exact distribution of the 2nd generated token given the 1st, for each 1st token.
    with torch.no_grad():
        p1 = torch.softmax(target(torch.tensor([prompt])).logits[0, -1], -1)
        p2 = torch.stack(
            [
                torch.softmax(target(torch.tensor([prompt + [a]])).logits[0, -1], -1)
                for a in range(vocab)
            ]
        )
    joint = (p1[:, None] * p2).flatten()  # P(t1, t2)
    engine = make_engine(target, draft, draft_mode="on")
    counts = torch.zeros(vocab * vocab)
    trials, drafted, accepted = 3000, 0, 0
    for seed in range(trials):
        # The first token comes from the prefill, the second from a speculative pass (the
        # draft proposes it; the stop rule keeps two tokens once it sees a third, so the
        # proposal is worth verifying: see ``Output.horizon``).
        params = GenerationParams(max_tokens=8, temperature=1.0, seed=seed)
        g = engine.generate(prompt, params, stop_rule=lambda ts: 2 if len(ts) >= 3 else None)
        t1, t2 = g.run()
        counts[t1 * vocab + t2] += 1
        drafted += g.stats.proposed["draft"]
        accepted += g.stats.accepted["draft"]
    expected = joint * trials
    keep = expected >= 5  # chi-squared needs enough expected counts per cell
    observed = torch.cat([counts[keep], counts[~keep].sum()[None]])
    wanted = torch.cat([expected[keep], expected[~keep].sum()[None]])
    stat = float(((observed - wanted) ** 2 / wanted.clamp_min(1e-9)).sum())
    dof = int(keep.sum())  # cells - 1, with the pooled cell
    # chi-squared 99.9% quantile ~ dof + 3.1 * sqrt(2 dof) + 3 (Wilson-Hilferty, generous)
    assert stat < dof + 3.1 * (2 * dof) ** 0.5 + 3, (stat, dof)
    # the draft took part in many trials (n-gram offers take the one slot in others), judged
    assert drafted >= trials // 3 and 0 < accepted < drafted


def test_warm_prefills_ahead_and_the_request_reuses_it(target_model):
    engine = make_engine(target_model)
    prompt = PROMPTS[0] * 3
    computed = engine.warm(prompt, StopSignal())
    assert computed == len(prompt) - 1 and engine.target.ids == prompt[:-1]
    generation = engine.generate(prompt, GenerationParams(max_tokens=20))
    assert generation.run() == naive_greedy(target_model, prompt, 20)
    assert generation.stats.prefill_tokens == 1  # only the last prompt token was left


def test_warm_of_a_cached_prompt_runs_no_pass(target_model):
    """Typing one token at a completed place: the warm-up there finds its prompt cached (the
    request that follows recomputes the last token anyway) and leaves the model free."""
    engine = make_engine(target_model)
    prompt = PROMPTS[0] * 2
    engine.generate(prompt, GenerationParams(max_tokens=5)).run()  # caches prompt + output
    calls = engine.target.forward_calls
    assert engine.warm(prompt + [3], StopSignal()) == 0
    assert engine.target.forward_calls == calls
    assert engine.target.ids[: len(prompt)] == prompt


def test_warm_stops_between_chunks_and_keeps_what_it_computed(target_model):
    engine = make_engine(target_model)
    engine.calibration.prefill_rate = 32.0  # 32 tokens/s: a 0.25 s chunk holds 8 tokens
    prompt = PROMPTS[2] * 4  # 44 tokens
    computed = engine.warm(prompt, CancelAfter(checks=2), chunk_s=0.25)
    assert computed == 16  # two chunks of 8, then the request's cancel was seen
    generation = engine.generate(prompt, GenerationParams(max_tokens=10))
    assert generation.run() == naive_greedy(target_model, prompt, 10)
    assert generation.stats.cached_tokens == 16


def test_warm_interrupted_inside_a_chunk_drops_that_chunk_only(target_model):
    engine = make_engine(target_model)
    engine.calibration.prefill_rate = 32.0  # a 0.25 s chunk holds 8 tokens
    prompt = PROMPTS[2] * 4  # 44 tokens
    stop = PreemptAfter(3)  # both layers of the first chunk, one of the second
    computed = engine.warm(prompt, stop, chunk_s=0.25)
    assert computed == 8 and engine.target.ids == prompt[:8]
    generation = engine.generate(prompt, GenerationParams(max_tokens=10))
    assert generation.run() == naive_greedy(target_model, prompt, 10)
    assert generation.stats.cached_tokens == 8


def test_a_cancel_stops_a_decoding_pass_between_layers(target_model):
    """The cancel flag is asked before every decoder layer of a decoding pass: a request
    superseded mid-pass gives the model up within a layer, and the cache stays consistent."""
    engine = make_engine(target_model)
    prompt = PROMPTS[1] * 3
    # asked 4 times by the prefill (chunks of 8), then per pass once before it and once per
    # layer (2): set at the 2nd layer of the 2nd pass
    stop = CancelAfter(checks=4 + 3 + 2)
    generation = engine.generate(prompt, GenerationParams(max_tokens=30), stop=stop)
    tokens = generation.run()
    assert generation.stats.stop_reason == "cancelled"
    assert generation.stats.target_passes == 1  # the second pass stopped inside
    assert engine.target.ids == prompt + tokens[:-1]  # the last token is pending, not cached
    again = engine.generate(prompt, GenerationParams(max_tokens=12))
    assert again.run() == naive_greedy(target_model, prompt, 12)


def test_each_chain_verified_is_a_bet_on_record(target_model):
    """Every pass that verified proposed tokens (a chain) records the policy's prediction for
    them and what the target kept: the bench checks the estimates against these."""
    engine = make_engine(target_model, branches=1)
    generation = engine.generate(PROMPTS[0], GenerationParams(max_tokens=40, use_draft=False))
    generation.run()
    stats = generation.stats
    chains = [(width, kept) for width, kept, _ in stats.pass_log if width > 1]
    assert chains and len(stats.bets) == len(chains)
    for (width, kept), (first, mean, variance, bet_kept) in zip(chains, stats.bets, strict=True):
        assert bet_kept == kept <= width - 1
        assert 0.0 < first <= 1.0 and 0.0 < mean <= width - 1
        # a count kept of width - 1 has a variance of at most mean * (width - 1 - mean)
        # (Bhatia-Davis): a policy whose spread does not fit its own mean fails here
        assert 0.0 <= variance <= mean * (width - 1 - mean) + 1e-9, (width, mean, variance)
    plain = engine.generate(PROMPTS[0], GenerationParams(max_tokens=40, speculate=False))
    plain.run()
    assert plain.stats.bets == []
