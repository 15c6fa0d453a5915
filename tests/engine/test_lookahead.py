"""Computing the next keystrokes' prompts ahead: a request that comes with one of them starts
from its logits without a pass, and every completion is the same, token for token, whether or
not it was looked ahead (hit, miss, or a look-ahead stopped half way)."""

import numpy as np
import pytest
from helpers import PreemptAfter, as_w8a8, tiny_qwen2

from codespec.engine import Cancelled, Engine, GenerationParams, StopSignal
from codespec.engine.policy import SpeculationPolicy
from codespec.torch_backend.attention import use_rowwise_attention
from codespec.torch_backend.kvcache import CachedModel

PROMPT = [(7 * i + 3) % 96 for i in range(30)]
# the prompts after typing: one more token; the last token replaced (typed text tokenized
# anew); two more tokens; one of them sharing the first with another
NEXT = [PROMPT + [40], PROMPT[:-1] + [41], PROMPT + [42, 43], PROMPT + [42, 44]]


@pytest.fixture(scope="module")
def w8a8_model():
    """A model whose one-row passes compute a row exactly as wider passes do (the CPU's
    quantized kernels): where look-ahead runs."""
    model = as_w8a8(tiny_qwen2(seed=5, vocab=96, hidden=64))
    use_rowwise_attention(model)
    return model


def cold_logits(model, ids: list[int]) -> np.ndarray:
    return CachedModel(model, prefill_chunk=8).prefill(ids)[0]


def looked_ahead(model) -> CachedModel:
    cached = CachedModel(model, prefill_chunk=8)
    logits, _, _ = cached.prefill(PROMPT)
    rows = cached.ahead.look_ahead(NEXT, known={tuple(PROMPT): logits})
    # the root is PROMPT[:-1]; computed: 41 beside PROMPT's last token (which stays cached as the
    # tree's first node), and 40, 42, 43, 44 after it (42 shared)
    assert (
        rows == 5
        and cached.ahead.standing is not None
        and cached.ahead.standing.root == len(PROMPT) - 1
    )
    return cached


@pytest.mark.parametrize("ids", [PROMPT, *NEXT])
def test_a_prompt_computed_ahead_is_answered_without_a_pass_with_its_own_logits(w8a8_model, ids):
    cached = looked_ahead(w8a8_model)
    assert cached.ahead.looked_ahead(ids)
    calls = cached.forward_calls
    logits, reused, computed = cached.prefill(ids)
    assert (reused, computed) == (len(ids), 0) and cached.forward_calls == calls
    assert np.array_equal(logits, cold_logits(w8a8_model, ids))
    # the cache holds that prompt, then (for PROMPT) the branches computed after it
    assert cached.ahead.sequence() == ids
    assert cached.ahead.standing is None if ids != PROMPT else cached.ahead.looked_ahead(NEXT[0])
    # and the next pass is what it is after a cold prefill of that prompt
    cold = CachedModel(w8a8_model, prefill_chunk=8)
    cold.prefill(ids)
    assert np.array_equal(cached.forward([7, 8]), cold.forward([7, 8]))


@pytest.mark.parametrize(
    "ids",
    [PROMPT + [42, 45], PROMPT + [50], PROMPT[:-2] + [60, 61], [1, 2, 3], PROMPT + [40, 9, 9]],
)
def test_any_other_prompt_reuses_what_it_can_and_gets_the_cold_logits(w8a8_model, ids):
    cached = looked_ahead(w8a8_model)
    assert not cached.ahead.looked_ahead(ids)
    logits, reused, computed = cached.prefill(ids)
    assert reused + computed == len(ids) and computed >= 1
    assert np.array_equal(logits, cold_logits(w8a8_model, ids))
    if ids[:-1] == PROMPT + [42] or ids[:-2] == PROMPT + [40]:  # a branch it could build on
        assert reused >= len(PROMPT) + 1
    assert np.array_equal(cached.forward([7]), _cold_after(w8a8_model, ids, [7]))


def _cold_after(model, ids, tokens):
    cold = CachedModel(model, prefill_chunk=8)
    cold.prefill(ids)
    return cold.forward(tokens)


@pytest.mark.parametrize("ids", NEXT)
def test_a_look_ahead_grows_in_passes_of_its_own(w8a8_model, ids):
    cached = CachedModel(w8a8_model, prefill_chunk=8)
    logits, _, _ = cached.prefill(PROMPT)
    known = {tuple(PROMPT): logits}
    assert cached.ahead.look_ahead(NEXT[:2], known) == 2  # 40, 41 (PROMPT's last token is cached)
    with pytest.raises(Cancelled):  # a third pass, interrupted: the first two stay
        cached.ahead.look_ahead([PROMPT + [50, 51]], known, stop=PreemptAfter(1))
    assert cached.ahead.look_ahead(NEXT[2:], known) == 3  # 42, 43, 44
    assert all(cached.ahead.looked_ahead(i) for i in NEXT) and not cached.ahead.looked_ahead(
        PROMPT + [50]
    )
    logits, reused, computed = cached.prefill(ids)
    assert (reused, computed) == (len(ids), 0)
    assert np.array_equal(logits, cold_logits(w8a8_model, ids))
    assert np.array_equal(cached.forward([7, 8]), _cold_after(w8a8_model, ids, [7, 8]))


def test_a_branch_taken_keeps_what_was_computed_after_it(w8a8_model):
    cached = looked_ahead(w8a8_model)
    assert cached.ahead.look_ahead([PROMPT + [40, 50], PROMPT + [40, 51, 52]]) == 3
    calls = cached.forward_calls
    assert np.array_equal(cached.prefill(PROMPT + [40])[0], cold_logits(w8a8_model, PROMPT + [40]))
    # the rest of that branch stands, rooted after it; the other branches are gone
    assert (
        cached.ahead.sequence() == PROMPT + [40] and cached.ahead.standing.root == len(PROMPT) + 1
    )
    assert not cached.ahead.looked_ahead(NEXT[1])
    for ids in (PROMPT + [40, 51, 52], PROMPT + [40, 50]):
        assert cached.ahead.looked_ahead(ids)
    logits, reused, computed = cached.prefill(PROMPT + [40, 51, 52])
    assert (reused, computed) == (len(PROMPT) + 3, 0) and cached.forward_calls == calls
    assert np.array_equal(logits, cold_logits(w8a8_model, PROMPT + [40, 51, 52]))
    assert cached.ahead.standing is None and cached.ids == PROMPT + [40, 51, 52]
    assert np.array_equal(cached.forward([7]), _cold_after(w8a8_model, PROMPT + [40, 51, 52], [7]))


def test_prompts_that_leave_the_root_start_a_new_look_ahead(w8a8_model):
    cached = looked_ahead(w8a8_model)
    other = PROMPT[:-3] + [70]
    assert cached.ahead.look_ahead([other]) == 1 and cached.ahead.standing.root == len(PROMPT) - 3
    assert cached.ahead.looked_ahead(other) and not cached.ahead.looked_ahead(NEXT[0])
    assert np.array_equal(cached.prefill(other)[0], cold_logits(w8a8_model, other))


@pytest.mark.parametrize("surgery", ["crop", "keep", "forward", "reset"])
def test_any_other_use_of_the_cache_ends_the_look_ahead_first(w8a8_model, surgery):
    cached = looked_ahead(w8a8_model)
    root = cached.ahead.standing.root
    if surgery == "crop":
        cached.crop(10)
        assert cached.ids == PROMPT[:10]
    elif surgery == "keep":
        cached.keep(root, [])
        assert cached.ids == PROMPT[:root]
    elif surgery == "forward":
        out = cached.forward([7])
        assert cached.ids == PROMPT[:root] + [7]
        assert np.array_equal(out, _cold_after(w8a8_model, PROMPT[:root], [7]))
    else:
        cached.reset()
        assert cached.ids == []
    assert cached.ahead.standing is None


@pytest.mark.parametrize("known", [False, True])
def test_an_interrupted_look_ahead_leaves_a_usable_cache(w8a8_model, known):
    cached = CachedModel(w8a8_model, prefill_chunk=8)
    logits, _, _ = cached.prefill(PROMPT)
    with pytest.raises(Cancelled):
        cached.ahead.look_ahead(NEXT, {tuple(PROMPT): logits} if known else {}, PreemptAfter(1))
    # what stays: the prompt the caller knows (still cached), else just the root
    assert cached.ahead.looked_ahead(PROMPT) == known
    if not known:
        assert cached.ahead.standing is None and cached.ids == PROMPT[:-1]
    logits, reused, _ = cached.prefill(NEXT[0])
    assert reused == len(PROMPT) - (0 if known else 1)
    assert np.array_equal(logits, cold_logits(w8a8_model, NEXT[0]))


def engine_for(model) -> Engine:
    engine = Engine(CachedModel(model, prefill_chunk=8), policy=SpeculationPolicy())
    engine.calibration.pad_single_row = (
        False  # w8a8: one-row passes are exact (``calibrate`` checks)
    )
    return engine


def next_of(logits: np.ndarray) -> list[list[int]]:
    """The look-ahead's choice: the prompt extended by each of the 5 likeliest tokens (in two
    passes: ``AHEAD_FIRST`` and the rest)."""
    return [PROMPT + [t] for t in np.argsort(logits)[::-1][:5].tolist()]


@pytest.mark.parametrize("speculate", [False, True])
def test_completions_are_the_same_with_and_without_look_ahead(w8a8_model, speculate):
    params = GenerationParams(max_tokens=12, speculate=speculate)
    plain = engine_for(w8a8_model)
    first = plain.generate(PROMPT, params).run()
    candidates = next_of(plain.warm_ups.prompt_logits[1])
    expected = {tuple(ids): plain.generate(ids, params).run() for ids in candidates}
    expected[(1, 2, 3)] = plain.generate([1, 2, 3], params).run()

    for ids, tokens in expected.items():
        engine = engine_for(w8a8_model)
        assert engine.generate(PROMPT, params).run() == first
        rows = engine.look_ahead(PROMPT, next_of, StopSignal())
        # the prompt itself came from the request: the 5 branches, and after each the target's
        # choice there (unless that ends the text)
        assert 5 < rows <= 10
        assert engine.look_ahead(PROMPT, next_of, StopSignal()) == 0  # done already
        generation = engine.generate(list(ids), params)
        assert generation.run() == tokens
        assert generation.stats.ahead == (list(ids) in candidates)


def test_a_look_ahead_stopped_in_its_second_pass_keeps_the_first(w8a8_model):
    from codespec.engine.warmup import AHEAD_FIRST

    engine = engine_for(w8a8_model)
    engine.generate(PROMPT, GenerationParams(max_tokens=4)).run()
    layers = w8a8_model.config.num_hidden_layers
    rows = engine.look_ahead(PROMPT, next_of, PreemptAfter(layers + 1))
    assert rows == AHEAD_FIRST
    candidates = next_of(engine.warm_ups.prompt_logits[1])
    assert [engine.target.ahead.looked_ahead(ids) for ids in candidates] == [True] * AHEAD_FIRST + [
        False
    ] * (len(candidates) - AHEAD_FIRST)


@pytest.mark.parametrize("speculate", [False, True])
def test_the_second_token_of_a_prompt_computed_ahead_needs_no_pass_either(w8a8_model, speculate):
    """The look-ahead also computes the target's choice after each prompt: a request that
    starts from one then runs a pass less, and gets the same tokens (speculating too: its
    first pass then computes the proposals' rows only; how many passes the policy runs depends
    on what it measured, so only plain decoding's are counted)."""
    params = GenerationParams(max_tokens=10, speculate=speculate)
    reference = engine_for(w8a8_model)
    reference.generate(PROMPT, params).run()
    candidates = next_of(reference.warm_ups.prompt_logits[1])
    for ids in candidates:
        reference.target.reset()
        expected = reference.generate(ids, params)
        expected.run()
        decoding_passes = expected.stats.target_passes  # (its prefill took passes of its own)

        engine = engine_for(w8a8_model)
        engine.generate(PROMPT, params).run()
        engine.look_ahead(PROMPT, next_of, StopSignal())
        calls = engine.target.forward_calls
        generation = engine.generate(ids, params)
        assert generation.run() == expected.tokens and generation.stats.ahead
        if not speculate:  # one pass a token: no prefill pass, and the first decoding pass
            assert engine.target.forward_calls - calls == decoding_passes - 1  # saved too


def test_look_ahead_stays_off_where_one_row_passes_round_differently(target_model):
    engine = Engine(CachedModel(target_model, prefill_chunk=8))
    assert engine.calibration.pad_single_row  # until calibrate() proves otherwise
    engine.generate(PROMPT, GenerationParams(max_tokens=3)).run()
    assert engine.look_ahead(PROMPT, next_of, StopSignal()) == 0
    assert engine.target.ahead.standing is None


def test_a_cancelled_look_ahead_keeps_no_branch_and_changes_no_completion(w8a8_model):
    params = GenerationParams(max_tokens=8)
    reference = engine_for(w8a8_model)
    reference.generate(PROMPT, params).run()
    ids = next_of(reference.warm_ups.prompt_logits[1])[0]
    expected = reference.generate(ids, params).run()
    engine = engine_for(w8a8_model)
    engine.generate(PROMPT, params).run()
    assert engine.look_ahead(PROMPT, next_of, PreemptAfter(1)) == 0
    assert not any(
        engine.target.ahead.looked_ahead(c) for c in next_of(engine.warm_ups.prompt_logits[1])
    )
    generation = engine.generate(ids, params)
    assert generation.run() == expected and not generation.stats.ahead
