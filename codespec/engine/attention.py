"""Row-wise attention for decode passes: each row's result independent of the pass's width.

Why: greedy speculative output must equal plain greedy decoding token for token. In fp32 the
logits of a position differ by ~1e-6 between a one-token pass and a k-token verification pass,
which never flips an argmax in practice; in bf16 on CPU they differ by up to ~0.25 (a few bf16
steps at typical logit sizes), and at a near-tie the verifier then picks another token than
plain decoding would. Two things make a row's numbers depend on the width of its pass:

1. the linear layers: a one-row GEMM runs another kernel (another summation order) than a
   GEMM of two or more rows; rows of GEMMs with two or more rows agree (measured on this CPU
   for widths 2-16). The decode loop therefore never runs a one-token pass: a lone pending
   token gets a padding row (see ``loop.Engine._verify``);
2. attention: one fused call over all rows, with masked keys, sums in blocks that depend on the
   total key count. Here each query row attends alone, to exactly the keys it may see, in cache
   order: the same tensor shapes and values as when plain decoding computes that position.

With both, the logits of a position are bit-identical whether it was computed by plain
decoding or inside any verification chain or tree (``tests/engine/test_exactness.py``).
Passes wider than ``ROW_WISE_MAX_ROWS`` (prefill chunks) use the fused SDPA path: prefill is
the same computation for plain and speculative decoding.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

NAME = "codespec_rowwise"
ROW_WISE_MAX_ROWS = 64


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
    if q > ROW_WISE_MAX_ROWS or query.shape[0] != 1:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout, scaling, is_causal, **kwargs
        )
    kv_heads = key.shape[1]
    past = key.shape[2] - q
    rows = []
    for i in range(q):
        keys, values = _visible(key, value, attention_mask, past, i)
        # grouped-query attention: the query heads sharing a kv head form one (n_rep, dim) block
        row = query[:, :, i : i + 1].reshape(1, kv_heads, heads // kv_heads, dim)
        out = F.scaled_dot_product_attention(row, keys, values, scale=scaling)
        rows.append(out.reshape(1, heads, 1, dim))
    return torch.cat(rows, dim=2).transpose(1, 2).contiguous(), None


def _visible(key, value, mask, past: int, row: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The keys and values query ``row`` may attend to, in cache order (a view when they form
    a prefix, which is every row of a chain; a gathered copy for tree branches)."""
    if mask is None:  # plain causal
        return key[:, :, : past + row + 1], value[:, :, : past + row + 1]
    seen = mask[0, 0, row]
    seen = seen if seen.dtype == torch.bool else seen == 0
    n = int(seen.sum())
    if bool(seen[:n].all()):
        return key[:, :, :n], value[:, :, :n]
    index = seen.nonzero().squeeze(1)
    return key.index_select(2, index), value.index_select(2, index)


def use_rowwise_attention(model: torch.nn.Module) -> None:
    """Switch a Hugging Face model to row-wise attention for decode passes."""
    AttentionInterface.register(NAME, rowwise_attention)
    # The masks SDPA gets (without one registered, transformers passes no mask at all and a
    # prefill chunk after cached tokens would be treated as if it started the sequence).
    AttentionMaskInterface.register(NAME, sdpa_mask)
    model.set_attn_implementation(NAME)
