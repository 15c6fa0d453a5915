"""GGUF file -> weight-only quantized tensors for the CPU, without a trip through bf16.

Q4_K tensors keep their exact codes: a Q4_K super-block of 256 weights is 8 sub-blocks of 32,
each ``w = (d * sc) * q - (dmin * m)`` with 4-bit ``q``, which is ``Int4Weight`` with group 32.
Every other type (Q6_K, Q5_0, Q8_0, F16, ...) is dequantized by the ``gguf`` package and stored
as int8 with one scale per output row. Norms and biases stay float32.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from .layers import GROUP, Int4Weight, QuantWeight, quantize_int8

Q4_K_BLOCK_BYTES = 144  # fp16 d, fp16 dmin, 12 bytes of 6-bit scales/mins, 128 bytes of codes
Q4_K_WEIGHTS = 256

# llama.cpp tensor names -> Hugging Face names, for the llama-style architectures (qwen2, llama)
_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_BLOCK_NAMES = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_BLOCK = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)$")


def hf_name(gguf_name: str) -> str:
    """The Hugging Face parameter name of a llama.cpp tensor name; KeyError if unknown."""
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    match = _BLOCK.match(gguf_name)
    if not match or match.group(2) not in _BLOCK_NAMES:
        raise KeyError(gguf_name)
    layer, part, kind = match.groups()
    return f"model.layers.{layer}.{_BLOCK_NAMES[part]}.{kind}"


def q4_k_to_int4(blocks: np.ndarray, n: int, k: int) -> Int4Weight:
    """Exact codes and affine pairs of a Q4_K tensor of ``n`` rows of ``k`` weights."""
    from gguf.quants import Q4_K

    blocks = blocks.reshape(-1, Q4_K_BLOCK_BYTES)
    count = blocks.shape[0]
    d = blocks[:, 0:2].view(np.float16).astype(np.float32)
    dmin = blocks[:, 2:4].view(np.float16).astype(np.float32)
    sc, m = Q4_K.get_scale_min(blocks[:, 4:16])  # (count, 8) each, 6-bit integers
    codes = blocks[:, 16:].reshape(count, 4, 1, 32) >> np.array([0, 4], np.uint8).reshape(
        1, 1, 2, 1
    )
    codes = (codes & 0x0F).reshape(n, k)  # sub-block 2j: low nibbles of bytes 32j..32j+31
    groups = k // GROUP
    scale = (d * sc.astype(np.float32)).reshape(n, groups)  # fp16 x 6-bit: exact in float32
    minimum = (dmin * m.astype(np.float32)).reshape(n, groups)
    return Int4Weight(
        torch.from_numpy(codes.copy()), torch.from_numpy(scale), torch.from_numpy(minimum)
    )


def read_tensors(path: Path) -> Iterator[tuple[str, QuantWeight | torch.Tensor]]:
    """(Hugging Face name, weight) for every tensor of a GGUF file: 2-D weights quantized,
    1-D tensors as float32."""
    from gguf import GGMLQuantizationType, GGUFReader
    from gguf.quants import dequantize

    reader = GGUFReader(str(path))
    for tensor in reader.tensors:
        name = hf_name(tensor.name)
        shape = [int(x) for x in reversed(tensor.shape)]  # GGUF lists the fastest dim first
        if len(shape) == 1:
            values = dequantize(tensor.data, tensor.tensor_type).reshape(shape)
            yield name, torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32))
        elif tensor.tensor_type == GGMLQuantizationType.Q4_K:
            yield name, q4_k_to_int4(np.asarray(tensor.data), *shape)
        else:
            values = dequantize(tensor.data, tensor.tensor_type).reshape(shape)
            yield name, quantize_int8(torch.from_numpy(np.ascontiguousarray(values)))


def stored_tensors(path: Path) -> dict[str, torch.Tensor]:
    """All tensors of a GGUF file in the stored form (``name.q4``, ``name.q8_scale``, ...)."""
    out: dict[str, torch.Tensor] = {}
    for name, weight in read_tensors(path):
        if isinstance(weight, torch.Tensor):
            out[name] = weight
        else:
            for key, value in weight.pack().items():
                out[f"{name}.{key}"] = value.contiguous()
    return out
