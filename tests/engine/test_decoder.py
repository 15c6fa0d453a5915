"""The lean decoder pass computes the Hugging Face model's own logits, bit for bit, through
prefill chunks, decoded chains, token trees and cache surgery, in every dtype and kernel the
engine runs; and it stops between layers like the model's forward does."""

import numpy as np
import pytest
import torch
from helpers import as_w8a8, tiny_llama, tiny_qwen2

from codespec.torch_backend import decoder as lean
from codespec.torch_backend.attention import use_rowwise_attention
from codespec.torch_backend.kvcache import CachedModel


def w8a8_qwen2(seed: int):
    """Fused w8a8 layers with two-digit inputs where the daemon uses them (down_proj)."""
    return as_w8a8(tiny_qwen2(seed=seed, vocab=96, hidden=64))


MODELS = {
    "qwen2 float32": lambda: tiny_qwen2(seed=4),
    "qwen2 bfloat16": lambda: tiny_qwen2(seed=4).to(torch.bfloat16),
    "llama float32": lambda: tiny_llama(seed=4),
    "qwen2 w8a8 fused": lambda: w8a8_qwen2(seed=4),
}


def passes(cached: CachedModel) -> list[np.ndarray]:
    """Every kind of pass the engine makes, in order; the logits of each."""
    out = []
    logits, _, _ = cached.prefill([(7 * i + 3) % 96 for i in range(21)])  # chunks of 8
    out.append(logits)
    out.append(cached.forward([5, 9, 11]))  # a decoded chain
    out.append(cached.forward([40]))  # one row
    # a token tree: 1 <- 2, 1 <- 3 (two branches after the first token)
    tree = np.array([[1, 0, 0], [1, 1, 0], [1, 0, 1]], dtype=np.bool_)
    base = len(cached.ids)
    out.append(cached.forward([12, 13, 14], tree_mask=tree, depths=[0, 1, 1]))
    cached.keep(base, [base, base + 2])  # the second branch was accepted
    out.append(cached.forward([15, 16], all_logits=False))
    return out


@pytest.mark.parametrize("kind", list(MODELS))
def test_the_lean_pass_computes_the_models_own_logits_bit_for_bit(kind):
    model = MODELS[kind]()
    use_rowwise_attention(model)
    assert lean.supports(model)
    fast, reference = CachedModel(model, prefill_chunk=8), CachedModel(model, prefill_chunk=8)
    reference.lean_decoder = False  # the Hugging Face forward, with the same attention
    assert fast._lean() and not reference._lean()
    got, want = passes(fast), passes(reference)
    assert fast.ids == reference.ids
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape
        assert np.array_equal(a, b)


def test_it_takes_over_only_where_row_wise_attention_is_on():
    model = tiny_qwen2(seed=4)  # sdpa: the model's own forward runs
    assert not CachedModel(model)._lean()
    use_rowwise_attention(model)
    assert CachedModel(model)._lean()


def test_other_architectures_keep_the_models_own_forward():
    sliding = tiny_qwen2(seed=4, use_sliding_window=True, sliding_window=8, max_window_layers=1)
    assert not lean.supports(sliding)  # a sliding-window layer
    assert not lean.supports(torch.nn.Linear(2, 2))
