"""benchmarks/pass_parts.py: its stand-ins for the linear layers and attention return what the
real ones would hand on, and put the real ones back; the weight bytes it prices the floor by."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from codespec.quant.layers import QuantLinear, quantize_int8, w8a8_available
from codespec.torch_backend import attention

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("pass_parts", ROOT / "benchmarks" / "pass_parts.py")
pass_parts = importlib.util.module_from_spec(spec)
sys.modules["pass_parts"] = pass_parts
spec.loader.exec_module(pass_parts)


def linear(kind: str) -> QuantLinear:
    weight = quantize_int8(torch.randn(48, 64, generator=torch.Generator().manual_seed(0)))
    return QuantLinear(weight, None, kind, torch.float32)


def test_free_linears_hand_on_the_real_output_and_restore_the_layer():
    layer = linear("int8")
    x = torch.randn(1, 3, 64)
    real = layer(x)
    outputs: dict = {}
    with pass_parts.free_linears(outputs):
        first, second = layer(x), layer(x)
        assert torch.equal(first, real) and torch.equal(second, real)
        second.add_(1.0)  # a caller writing into its output leaves the remembered one alone
        assert torch.equal(layer(x), real)
        assert layer(torch.randn(1, 2, 64)).shape == (1, 2, 48)  # another shape: its own
    assert len(outputs) == 2
    assert not torch.equal(layer(x + 1.0), real)  # the real layer is back


def test_free_attention_returns_the_query_and_restores_attention():
    real = attention.F
    query = torch.randn(1, 2, 6, 8)
    with pass_parts.free_attention():
        out = attention.F.scaled_dot_product_attention(query, None, None, scale=0.5)
        assert torch.equal(out, query) and out is not query
    assert attention.F is real


def test_weight_bytes_count_what_a_pass_reads(target_model):
    embed = target_model.get_input_embeddings().weight
    head = target_model.get_output_embeddings().weight
    unique = {t.data_ptr(): t for t in [*target_model.parameters(), *target_model.buffers()]}
    everything = sum(t.numel() * t.element_size() for t in unique.values())
    table = 0 if head.data_ptr() == embed.data_ptr() else embed.numel() * embed.element_size()
    assert pass_parts.weight_bytes(target_model) == everything - table


@pytest.mark.skipif(not w8a8_available(), reason="no w8a8 kernel on this CPU")
def test_weight_bytes_count_packed_w8a8_weights_a_byte_each():
    model = torch.nn.Module()
    model.proj = linear("w8a8")
    model.get_input_embeddings = lambda: torch.nn.Identity()
    assert pass_parts.weight_bytes(model) == 48 * 64
