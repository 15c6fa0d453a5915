"""KV reuse across requests gives the logits of a cold run and computes only the new tail."""

import numpy as np
import pytest
from helpers import CancelAfter, PreemptAfter

from codespec.engine import Cancelled, StopSignal
from codespec.engine.slots import common_prefix_len
from codespec.torch_backend.attention import use_rowwise_attention
from codespec.torch_backend.kvcache import CachedModel


def test_common_prefix_len():
    assert common_prefix_len([1, 2, 3], [1, 2, 4]) == 2
    assert common_prefix_len([], [1]) == 0
    assert common_prefix_len([1, 2], [1, 2]) == 2


@pytest.mark.parametrize(
    "first, second",
    [
        ([1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6, 7, 8]),  # extend
        ([1, 2, 3, 4, 5, 6], [1, 2, 3, 9, 9]),  # crop, then extend
        ([1, 2, 3, 4, 5, 6], [1, 2, 3, 4]),  # shorter
        ([1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6]),  # identical
        ([1, 2, 3], [7, 8, 9]),  # nothing shared
    ],
)
def test_reuse_matches_cold(target_model, first, second):
    warm = CachedModel(target_model, prefill_chunk=4)
    warm.prefill(first)
    logits, reused, computed = warm.prefill(second)
    cold_logits, _, _ = CachedModel(target_model).prefill(second)
    np.testing.assert_allclose(logits, cold_logits, atol=1e-4, rtol=1e-4)
    expected_reuse = min(common_prefix_len(first, second), len(second) - 1)
    assert (reused, computed) == (expected_reuse, len(second) - expected_reuse)
    assert warm.ids == second


def test_prefill_cancels_between_chunks(target_model):
    cached = CachedModel(target_model, prefill_chunk=2)
    stop = StopSignal()
    stop.cancel(keep_chunk=True)
    with pytest.raises(Cancelled):
        cached.prefill(list(range(1, 20)), stop)


def test_a_cancelled_keystroke_sized_chunk_stops_between_layers(target_model):
    from codespec.engine.stop import REDO_ROWS

    cached = CachedModel(target_model, prefill_chunk=16)
    cached.prefill([1, 2, 3, 4, 5])
    cancel = CancelAfter(2)  # before the chunk, before layer 0: not yet; before layer 1: set
    with pytest.raises(Cancelled):
        cached.prefill([1, 2, 3, 4, 5] + [6] * REDO_ROWS, cancel)
    assert cancel.asked == 3
    assert cached.ids == [1, 2, 3, 4, 5]  # the chunk's first layer was cut back
    _, reused, computed = cached.prefill([1, 2, 3, 4, 5, 6, 7])
    assert (reused, computed) == (5, 2)


def test_a_cancelled_larger_chunk_finishes_and_stays_cached(target_model):
    from codespec.engine.stop import REDO_ROWS

    cached = CachedModel(target_model, prefill_chunk=REDO_ROWS + 1)
    prompt = list(range(1, 3 * (REDO_ROWS + 1) + 1))
    cancel = CancelAfter(1)  # set while the first chunk runs: it finishes, the next never starts
    with pytest.raises(Cancelled):
        cached.prefill(prompt, cancel)
    assert cancel.asked == 2
    assert cached.ids == prompt[: REDO_ROWS + 1]


@pytest.mark.parametrize("lean", [True, False], ids=["lean pass", "model's forward"])
def test_a_pass_interrupted_between_layers_leaves_the_cache_as_it_was(target_model, lean):
    use_rowwise_attention(target_model)  # as the engine does: the lean pass calls it
    cached = CachedModel(target_model)
    cached.lean_decoder = lean
    assert cached._lean() == lean and len(cached.decoder_layers) == 2
    cached.prefill([1, 2, 3, 4, 5])
    stop = PreemptAfter(1)  # layer 0 runs, layer 1 does not
    with pytest.raises(Cancelled):
        cached.forward([6, 7, 8], stop=stop)
    assert stop.asked == 2
    assert cached.ids == [1, 2, 3, 4, 5]
    assert [layer.keys.shape[-2] for layer in cached._layers()] == [5, 5]
    assert not any(layer._forward_pre_hooks for layer in cached.decoder_layers)  # unhooked
    logits = cached.forward([6, 7, 8])
    cold = CachedModel(target_model).forward(list(range(1, 9)))
    np.testing.assert_allclose(logits, cold[-3:], atol=1e-4, rtol=1e-4)


def test_an_interrupted_prefill_of_a_new_place_keeps_the_parked_ones(target_model):
    from codespec.engine.slots import PARK_MIN_TOKENS

    cached = CachedModel(target_model, prefill_chunk=16)
    place_a = [1 + i % 60 for i in range(PARK_MIN_TOKENS + 20)]
    place_b = [70 + i % 20 for i in range(40)]
    cached.prefill(place_a)
    with pytest.raises(Cancelled):  # nothing shared: place a is parked, b starts from nothing
        cached.prefill(place_b, PreemptAfter(3))  # stops inside b's second chunk
    assert cached.ids == place_b[:16]
    with pytest.raises(Cancelled):
        cached.prefill([90] + place_b, PreemptAfter(1))  # stops inside the first pass
    assert cached.ids == []
    _, reused, computed = cached.prefill(place_a)
    assert (reused, computed) == (len(place_a) - 1, 1)  # the parked place survived both


def test_a_jump_parks_the_old_place_and_a_return_reuses_it(target_model):
    from codespec.engine.slots import PARK_MIN_TOKENS

    cached = CachedModel(target_model, prefill_chunk=64, slots=3)
    shared = list(range(1, 41))
    place_a = shared + [50 + i % 40 for i in range(PARK_MIN_TOKENS + 20)]
    place_b = shared + [7 + i % 30 for i in range(PARK_MIN_TOKENS + 10)]
    logits_a, _, _ = cached.prefill(place_a)
    _, reused, _ = cached.prefill(place_b)
    assert reused == len(shared)  # the shared prefix came from the first place's cache
    again, reused, computed = cached.prefill(place_a)
    assert (reused, computed) == (len(place_a) - 1, 1)  # the first place was kept whole
    np.testing.assert_allclose(again, logits_a, atol=1e-5)
    cold = CachedModel(target_model).prefill(place_a)[0]
    np.testing.assert_allclose(again, cold, atol=1e-5)


def test_the_least_recently_used_place_is_dropped(target_model):
    from codespec.engine.slots import PARK_MIN_TOKENS

    cached = CachedModel(target_model, slots=2)
    places = [[p] + [p + 1 + i % 20 for i in range(PARK_MIN_TOKENS + 5)] for p in (1, 30, 60)]
    for ids in places:
        cached.prefill(ids)
    assert len(cached.pool.parked) == 1 and cached.pool.parked[0].ids == places[1]
    assert cached.prefill(places[0])[1] == 0  # gone: computed again from scratch


def test_parked_places_are_dropped_beyond_the_byte_budget(target_model):
    from codespec.engine.slots import PARK_MIN_TOKENS
    from codespec.torch_backend.buffers import cache_bytes

    places = [[p] + [p + 1 + i % 20 for i in range(PARK_MIN_TOKENS + 5)] for p in (1, 30, 60)]
    probe = CachedModel(target_model)
    probe.prefill(places[0])
    one_place = cache_bytes(probe.cache)
    assert one_place > 0
    # room for one parked place, not two: slots alone would keep both
    cached = CachedModel(target_model, slots=4, parked_budget_bytes=int(1.5 * one_place))
    for ids in places:
        cached.prefill(ids)
    assert [slot.ids for slot in cached.pool.parked] == [places[1]]
    assert cached.prefill(places[1])[1] == len(places[1]) - 1  # the recent one was kept
    assert cached.prefill(places[0])[1] == 0  # the oldest went: computed from scratch


def test_typing_stays_in_the_same_slot(target_model):
    cached = CachedModel(target_model, slots=3)
    cached.prefill(list(range(1, 60)))
    cached.forward([61, 62, 63])  # a completion's tokens after the prompt
    cached.prefill(list(range(1, 60)) + [70])  # the user typed something else
    assert cached.pool.parked == []


def test_appending_writes_into_the_buffer_without_copying_the_cache(target_model):
    cached = CachedModel(target_model)
    cached.prefill(list(range(1, 30)))
    layer = cached.cache.layers[0]
    buffer = layer.buffers[0]
    for token in (31, 32, 33):
        cached.forward([token])
    assert layer.buffers[0] is buffer and layer.keys.data_ptr() == buffer.data_ptr()
    assert layer.keys.shape[-2] == 32
    cached.crop(20)
    logits = cached.forward([40, 41])[-1]
    assert layer.buffers[0] is buffer  # cropped, then overwritten in place
    cold = CachedModel(target_model).prefill(list(range(1, 21)) + [40, 41])[0]
    np.testing.assert_allclose(logits, cold, atol=1e-5)


def test_places_sharing_a_prefix_never_write_into_each_other(target_model):
    """A forked place copies what it shares: writing to one place leaves the others intact."""
    from codespec.engine.slots import PARK_MIN_TOKENS

    cached = CachedModel(target_model, prefill_chunk=64, slots=3)
    shared = list(range(1, 41))
    place_a = shared + [50 + i % 40 for i in range(PARK_MIN_TOKENS + 20)]
    place_b = shared + [7 + i % 30 for i in range(PARK_MIN_TOKENS + 10)]
    cached.prefill(place_a)
    cached.prefill(place_b)  # a fork of A's first 40 positions, then B's own
    cached.prefill(place_a)
    cached.prefill(shared[:10] + [90, 91, 92])  # a fork of A's first 10, written over
    for place in (place_b, place_a):
        logits, reused, _ = cached.prefill(place)
        assert reused == len(place) - 1  # the place's slot was kept whole ...
        cold = CachedModel(target_model).prefill(place)[0]
        np.testing.assert_allclose(logits, cold, atol=1e-5)  # ... and holds what it should
