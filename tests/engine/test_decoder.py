"""The lean decoder pass computes the Hugging Face model's own logits, bit for bit, through
prefill chunks, decoded chains, token trees and cache surgery, in every dtype and kernel the
engine runs; and it stops between layers like the model's forward does."""

import pytest
import torch
from helpers import TrueAfter, tiny_qwen2

from codespec.engine import CachedModel, Cancelled
from codespec.engine import decoder as lean
from codespec.engine.attention import use_rowwise_attention
from codespec.quant import kernels
from codespec.quant.load import build_quantized, quantize_dense


def tiny_llama(seed: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=96,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
    )
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        model.model.embed_tokens.weight.normal_(0.0, 1.0)
    return model


def w8a8_qwen2(seed: int):
    """Fused w8a8 layers with two-digit inputs where the daemon uses them (down_proj)."""
    dense = tiny_qwen2(seed=seed, vocab=96, hidden=64)
    plan = kernels.KernelPlan(dtype="float32", kernels={}, forced="w8a8")
    return build_quantized(
        dense.config,
        quantize_dense(dense.state_dict(), "int4"),
        torch.float32,
        plan.kernel_for,
        digits_for=plan.digits_for,
    )


MODELS = {
    "qwen2 float32": lambda: tiny_qwen2(seed=4),
    "qwen2 bfloat16": lambda: tiny_qwen2(seed=4).to(torch.bfloat16),
    "llama float32": lambda: tiny_llama(seed=4),
    "qwen2 w8a8 fused": lambda: w8a8_qwen2(seed=4),
}


def passes(cached: CachedModel) -> list[torch.Tensor]:
    """Every kind of pass the engine makes, in order; the logits of each."""
    out = []
    logits, _, _ = cached.prefill([(7 * i + 3) % 96 for i in range(21)])  # chunks of 8
    out.append(logits)
    out.append(cached.forward([5, 9, 11]))  # a decoded chain
    out.append(cached.forward([40]))  # one row
    # a token tree: 1 <- 2, 1 <- 3 (two branches after the first token)
    tree = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 0, 1]], dtype=torch.bool)
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
        assert torch.equal(a, b)


def test_it_takes_over_only_where_row_wise_attention_is_on():
    model = tiny_qwen2(seed=4)  # sdpa: the model's own forward runs
    assert not CachedModel(model)._lean()
    use_rowwise_attention(model)
    assert CachedModel(model)._lean()


def test_other_architectures_keep_the_models_own_forward():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=96,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        use_sliding_window=True,
        sliding_window=8,
        max_window_layers=1,
    )
    assert not lean.supports(Qwen2ForCausalLM(config))  # a sliding-window layer
    assert not lean.supports(torch.nn.Linear(2, 2))


def test_an_interrupted_lean_pass_leaves_the_cache_as_it_was():
    model = tiny_qwen2(seed=4)
    use_rowwise_attention(model)
    cached = CachedModel(model)
    cached.prefill([1, 2, 3, 4, 5])
    interrupt = TrueAfter(1)  # layer 0 runs, layer 1 does not
    with pytest.raises(Cancelled):
        cached.forward([6, 7, 8], interrupt=interrupt)
    assert interrupt.asked == 2
    assert cached.ids == [1, 2, 3, 4, 5]
    assert [layer.keys.shape[-2] for layer in cached._layers()] == [5, 5]
    again = cached.forward([6, 7, 8])
    cold = CachedModel(model).forward(list(range(1, 9)))
    # dense float32 GEMMs of 3 and 8 rows may round differently: close, not equal
    torch.testing.assert_close(again, cold[-3:], atol=1e-5, rtol=1e-5)
