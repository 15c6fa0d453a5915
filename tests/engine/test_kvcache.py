"""KV reuse across requests gives the logits of a cold run and computes only the new tail."""

import threading

import pytest
import torch

from codespec.engine import CachedModel, Cancelled
from codespec.engine.kvcache import common_prefix_len


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
    torch.testing.assert_close(logits, cold_logits, atol=1e-4, rtol=1e-4)
    expected_reuse = min(common_prefix_len(first, second), len(second) - 1)
    assert (reused, computed) == (expected_reuse, len(second) - expected_reuse)
    assert warm.ids == second


def test_prefill_cancels_between_chunks(target_model):
    cached = CachedModel(target_model, prefill_chunk=2)
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(Cancelled):
        cached.prefill(list(range(1, 20)), cancel)
