"""A lean forward pass for Qwen2- and Llama-style decoders, bit-identical to Hugging Face's.

Most of a one-row decode pass on a CPU is quantized GEMMs; most of the rest is per-call
overhead, and Hugging Face's generic forward adds its own on every pass and layer (keyword
plumbing through decorators, a causal mask built and then ignored by row-wise attention,
output records). This module runs the same layers with the same tensor ops in the same order,
so the logits are the same bits (``tests/engine/test_decoder.py`` compares them), in less time
a pass (``benchmarks/decoder_pass.py`` measures it; ``docs/benchmarks.md``, "Measurements
behind the code").

One pass, for token ids ``x`` at positions ``p`` (``cached`` keys/values before them)::

    h = embed(x)
    for each layer:
        a = rms_norm(h);  q, k, v = a Wq, a Wk, a Wv       (one fused GEMM where fused)
        q, k = rope(q, p), rope(k, p);  K, V = cache.append(k, v)
        h = h + attention(q, K, V) Wo                      (row-wise: see attention.py)
        a = rms_norm(h);  h = h + (silu(a Wg) * (a Wu)) Wd
    logits = rms_norm(h) W_lm                               (all rows, or just the last)

The model's modules still hold the weights and do the arithmetic of each linear layer (so
quantized and fused layers work unchanged); only the glue between them is written here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .attention import CHAIN, rowwise_attention

# model types whose decoder layers are exactly the loop above (Qwen2 without sliding windows)
ARCHITECTURES = ("qwen2", "llama")


def supports(model: torch.nn.Module) -> bool:
    """Whether ``model`` is a decoder this module runs (else use the model's own forward)."""
    config = getattr(model, "config", None)
    inner = getattr(model, "model", None)
    if getattr(config, "model_type", None) not in ARCHITECTURES or inner is None:
        return False
    layer_types = getattr(config, "layer_types", None) or ["full_attention"]
    return all(t == "full_attention" for t in layer_types) and hasattr(inner, "rotary_emb")


def forward(
    model: Any,  # a Hugging Face causal LM of ``ARCHITECTURES``: its parts are reached by name
    input_ids: torch.Tensor,  # (1, q)
    cache,  # a transformers Cache; each layer's keys and values are appended
    position_ids: torch.Tensor,  # (1, q)
    tree_mask: torch.Tensor | None = None,  # (1, 1, q, past + q) bool, for a token tree
    last_only: bool = False,
    before_layer: Callable[[], None] | None = None,
) -> torch.Tensor:
    """Logits (1, q, V), or (1, 1, V) with ``last_only``. ``before_layer`` is called before
    each layer and may raise to stop the pass (the layers that ran hold the new positions in
    the cache: the caller cuts them back)."""
    inner = model.model
    h = inner.embed_tokens(input_ids)
    cos, sin = inner.rotary_emb(h, position_ids)
    rotary = (cos.unsqueeze(1), _signed_sin(sin).unsqueeze(1))
    chain = tree_mask is None
    for index, layer in enumerate(inner.layers):
        if before_layer is not None:
            before_layer()
        h = decoder_layer(layer, index, h, rotary, cache, tree_mask, chain)
    if last_only:  # a row's norm and logits depend on that row only
        h = h[:, -1:]
    return model.lm_head(rms_norm(h, inner.norm))


def decoder_layer(layer, index: int, h, rotary, cache, tree_mask, chain: bool) -> torch.Tensor:
    """One decoder layer: attention and MLP, each with a pre-norm and a residual."""
    attn, mlp = layer.self_attn, layer.mlp
    batch, rows, _ = h.shape
    heads = (batch, rows, -1, attn.head_dim)
    q, k, v = _projections(attn, ("q_proj", "k_proj", "v_proj"), rms_norm(h, layer.input_layernorm))
    q = _rope(q.view(heads).transpose(1, 2), *rotary)
    k = _rope(k.view(heads).transpose(1, 2), *rotary)
    keys, values = cache.update(k, v.view(heads).transpose(1, 2), index)
    out, _ = rowwise_attention(
        attn, q, keys, values, tree_mask, scaling=attn.scaling, **{CHAIN: chain}
    )
    h = h + attn.o_proj(out.reshape(batch, rows, -1))
    gate, up = _projections(
        mlp, ("gate_proj", "up_proj"), rms_norm(h, layer.post_attention_layernorm)
    )
    return h + mlp.down_proj(mlp.act_fn(gate).mul_(up))


def rms_norm(x: torch.Tensor, norm: Any) -> torch.Tensor:  # (an RMSNorm module: weight, eps)
    """``weight * x / sqrt(mean(x^2) + eps)``, in float32 whatever the activations' dtype
    (Hugging Face's ``Qwen2RMSNorm``/``LlamaRMSNorm``, op for op)."""
    dtype = x.dtype
    x = x.to(torch.float32)
    variance = x.pow(2).mean(-1, keepdim=True)
    return norm.weight * (x * variance.add_(norm.variance_epsilon).rsqrt_()).to(dtype)


def _projections(module, names: tuple[str, ...], x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The outputs of the linear layers ``names`` of ``module`` for the same input: one GEMM
    when they were fused (``quant/fusion.py``), else one each."""
    first = getattr(module, names[0])
    fused = getattr(first, "fused", None)
    if fused is not None and all(getattr(module, n).fused is fused for n in names[1:]):
        return fused.layer(x).split(fused.sizes, dim=-1)
    return tuple(getattr(module, n)(x) for n in names)


def _signed_sin(sin: torch.Tensor) -> torch.Tensor:
    """``sin`` with its first half negated: rotary embedding computes ``x cos + rot(x) sin``
    with ``rot(x) = (-x2, x1)``; ``(x2, x1) * (-s1, s2)`` is the same product bit for bit (a
    sign flip is exact), one op fewer a use."""
    half = sin.shape[-1] // 2
    return torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)


def _rope(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return (x * cos) + (torch.cat((x[..., half:], x[..., :half]), dim=-1) * signed_sin)
