"""Row-wise attention: each row's result independent of the width of the pass that computes it.

Why: greedy speculative output must equal plain greedy decoding token for token. In fp32 the
logits of a position differ in the last bits between a one-token pass and a k-token
verification pass, which practically never flips an argmax; in bf16 on a CPU they differ by a
few bf16 steps, and at a near-tie the verifier then picks another token than plain decoding
would. Two things make a row's numbers depend on the width of its pass:

1. the linear layers: with dense float kernels a one-row GEMM may run another kernel (another
   summation order) than a GEMM of two or more rows, while rows of GEMMs with two or more rows
   agree. Calibration checks this at load (``calibration.one_row_is_exact``): where one-row
   passes differ, a lone pending token gets a padding row (``loop.Engine._verify``); where they
   are exact (the quantized kernels compute each row alone), one-token passes run as they are;
2. attention: one fused call over all rows, with masked keys, sums in blocks that depend on the
   total key count. Here each query row attends alone, to exactly the keys it may see, in cache
   order: the same tensor shapes and values as when plain decoding computes that position.

With both, the logits of a position are bit-identical whether it was computed by plain
decoding or inside any verification chain or tree (``tests/engine/test_exactness.py``).

Prefill chunks go row-wise too. A fused call over a chunk sums in blocks that depend on the
chunk's size and start, so the same prompt prefilled in chunks of 60, 100 or 256 tokens gave
logits up to 2.0 apart with w8a8 weights (activation quantization turns tiny differences into
whole steps): completions then depended on the machine's measured prefill speed and on what
the cache held before. Row-wise, a prompt's logits are a function of the prompt alone, for a
small share of prefill speed (``docs/benchmarks.md``, "Prefill").
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import AttentionInterface, PreTrainedModel
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

NAME = "codespec_rowwise"
# The keyword ``CachedModel`` passes with each pass (transformers hands a model's extra keywords
# on to the attention function): True for a chain of tokens (a prefill chunk or a decoded
# chain), False for a token tree. Without it, the mask is inspected, once in every layer.
CHAIN = "codespec_chain"


def rowwise_attention(
    module: torch.nn.Module,
    query: torch.Tensor,  # (1, heads, q, dim)
    key: torch.Tensor,  # (1, kv_heads, past + q, dim), the cache included
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,  # (1, 1, q, past + q): bool, or additive float
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    _, heads, q, dim = query.shape
    if query.shape[0] != 1:  # batches are not the engine's: keep transformers' own path
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout, scaling, is_causal, **kwargs
        )
    kv_heads = key.shape[1]
    past = key.shape[2] - q
    causal = kwargs.get(CHAIN)
    if causal is None:
        causal = attention_mask is None or _is_causal(attention_mask, past)
    rows = []
    for i in range(q):
        if causal:  # every row of a prefill chunk or a chain: a prefix of the cache, as a view
            keys, values = key[:, :, : past + i + 1], value[:, :, : past + i + 1]
        else:  # a tree: the row's ancestors, gathered in cache order
            keys, values = _visible(key, value, attention_mask, i)
        # grouped-query attention: the query heads sharing a kv head form one (n_rep, dim) block
        row = query[:, :, i : i + 1].reshape(1, kv_heads, heads // kv_heads, dim)
        out = F.scaled_dot_product_attention(row, keys, values, scale=scaling)
        rows.append(out.reshape(1, heads, 1, dim))
    out = rows[0] if q == 1 else torch.cat(rows, dim=2)  # (a one-row cat is just a copy)
    return out.transpose(1, 2).contiguous(), None


def _seen(mask: torch.Tensor) -> torch.Tensor:
    """The (q, keys) boolean mask of what each query row may see (masks come bool or additive)."""
    seen = mask[0, 0]
    return seen if seen.dtype == torch.bool else seen == 0


def _is_causal(mask: torch.Tensor, past: int) -> bool:
    """Whether row ``i`` sees exactly the first ``past + i + 1`` keys. (Not ``tril``: on the
    CPU it takes milliseconds for a (2, 2000) mask, an arange comparison microseconds.)"""
    seen = _seen(mask)
    q, keys = seen.shape
    causal = torch.arange(keys) <= torch.arange(past, past + q).unsqueeze(1)
    return torch.equal(seen, causal)


def _visible(key, value, mask, row: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The keys and values tree row ``row`` may attend to, in cache order: a view when they
    form a prefix (the first branch), a gathered copy otherwise."""
    seen = _seen(mask)[row]
    n = int(seen.sum())
    if bool(seen[:n].all()):
        return key[:, :, :n], value[:, :, :n]
    index = seen.nonzero().squeeze(1)
    return key.index_select(2, index), value.index_select(2, index)


def use_rowwise_attention(model: PreTrainedModel) -> None:
    """Switch a Hugging Face model to row-wise attention (decode passes and prefill)."""
    AttentionInterface.register(NAME, rowwise_attention)
    # The masks SDPA gets (without one registered, transformers passes no mask at all and a
    # prefill chunk after cached tokens would be treated as if it started the sequence).
    AttentionMaskInterface.register(NAME, sdpa_mask)
    model.set_attn_implementation(NAME)
