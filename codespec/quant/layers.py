"""Weight-only quantized layers for the CPU, over torch's own kernels.

Two stored forms, both plain tensors (safetensors, never pickle):

* ``Int4Weight``: 4-bit codes ``q`` in 0..15 with one affine pair per group of 32 inputs::

      w = scale * q - minimum          (GGUF's Q4_K sub-blocks have exactly this form)

  The kernel (``torch._weight_int4pack_mm_for_cpu``, "tinygemm") wants the same thing written
  as ``w = (q - 8) * scale + zero``, so ``zero = 8 * scale - minimum``.
* ``Int8Weight``: int8 codes with one scale per output row: ``w = scale * q``
  (``torch._weight_int8pack_mm``).

``QuantLinear`` runs either; ``QuantEmbedding`` gathers rows of either and dequantizes just
those. Both kernels compute each output row from its own input row only, so a position's
result does not depend on how many rows its pass had (checked at load, see ``kernels.py``):
that is what keeps speculative verification bit-identical to plain decoding.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

GROUP = 32  # inputs per int4 scale/minimum pair (a GGUF Q4_K sub-block)


@dataclass
class Int4Weight:
    """(N, K) weight as 4-bit codes and per-group affine pairs, all on the CPU."""

    q: torch.Tensor  # (N, K) uint8 codes 0..15
    scale: torch.Tensor  # (N, K // GROUP) float32
    minimum: torch.Tensor  # (N, K // GROUP) float32

    def dequantize(self) -> torch.Tensor:
        n, k = self.q.shape
        groups = self.q.reshape(n, k // GROUP, GROUP).float()
        return (groups * self.scale[..., None] - self.minimum[..., None]).reshape(n, k)

    def pack(self) -> dict[str, torch.Tensor]:
        """Two codes per byte (low nibble first), for storing."""
        q = self.q
        return {
            "q4": q[:, 0::2] | (q[:, 1::2] << 4),
            "q4_scale": self.scale,
            "q4_min": self.minimum,
        }

    @staticmethod
    def unpack(stored: dict[str, torch.Tensor]) -> Int4Weight:
        packed = stored["q4"]
        q = torch.stack([packed & 0x0F, packed >> 4], dim=-1).reshape(packed.shape[0], -1)
        return Int4Weight(q, stored["q4_scale"].float(), stored["q4_min"].float())


@dataclass
class Int8Weight:
    """(N, K) weight as int8 codes and one scale per output row."""

    q: torch.Tensor  # (N, K) int8
    scale: torch.Tensor  # (N,) float32

    def dequantize(self) -> torch.Tensor:
        return self.q.float() * self.scale[:, None]

    def pack(self) -> dict[str, torch.Tensor]:
        return {"q8": self.q, "q8_scale": self.scale}

    @staticmethod
    def unpack(stored: dict[str, torch.Tensor]) -> Int8Weight:
        return Int8Weight(stored["q8"], stored["q8_scale"].float())


QuantWeight = Int4Weight | Int8Weight


def quantize_int4(weight: torch.Tensor) -> Int4Weight:
    """Asymmetric min/max 4-bit quantization per group of ``GROUP`` inputs."""
    n, k = weight.shape
    groups = weight.float().reshape(n, k // GROUP, GROUP)
    low, high = groups.amin(-1), groups.amax(-1)
    scale = ((high - low) / 15).clamp(min=1e-12)
    q = torch.round((groups - low[..., None]) / scale[..., None]).clamp(0, 15)
    return Int4Weight(q.to(torch.uint8).reshape(n, k), scale, -low)


def quantize_int8(weight: torch.Tensor) -> Int8Weight:
    """Symmetric 8-bit quantization with one scale per output row."""
    w = weight.float()
    scale = (w.abs().amax(1) / 127).clamp(min=1e-12)
    q = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)
    return Int8Weight(q, scale)


def int4_fits(n: int, k: int) -> bool:
    """Shapes the CPU int4 kernel takes: whole groups along K, N a multiple of 16."""
    return k % GROUP == 0 and n % 16 == 0


def unpack_stored(stored: dict[str, torch.Tensor]) -> QuantWeight:
    """The weight from its stored tensors (keys ``q4*`` or ``q8*``)."""
    return Int4Weight.unpack(stored) if "q4" in stored else Int8Weight.unpack(stored)


class QuantLinear(torch.nn.Module):
    """``y = x W^T + b`` with W int4 (group 32) or int8 (per row); activations in ``dtype``."""

    def __init__(
        self, weight: QuantWeight, bias: torch.Tensor | None, kind: str, dtype: torch.dtype
    ) -> None:
        super().__init__()
        n, k = weight.q.shape
        self.in_features, self.out_features = k, n
        self.kind, self.dtype = kind, dtype
        if kind == "int4":
            if not isinstance(weight, Int4Weight) or not int4_fits(n, k):
                raise ValueError(f"int4 kernel needs an int4 weight of fitting shape ({n}x{k})")
            self.register_buffer(
                "packed", torch.ops.aten._convert_weight_to_int4pack_for_cpu(weight.q.int(), 1)
            )
            zero = 8 * weight.scale - weight.minimum
            # (K // GROUP, N, 2): scale and zero per group and output, in the activation dtype
            pairs = torch.stack([weight.scale, zero], dim=-1).transpose(0, 1).contiguous()
            self.register_buffer("scale_zero", pairs.to(dtype))
        elif kind == "int8":
            w8 = weight if isinstance(weight, Int8Weight) else quantize_int8(weight.dequantize())
            self.register_buffer("q8", w8.q.contiguous())
            self.register_buffer("scale", w8.scale.to(dtype))
        else:
            raise ValueError(f"unknown kernel {kind!r}")
        self.bias = None if bias is None else torch.nn.Parameter(bias.to(dtype), False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x2 = x.reshape(-1, shape[-1]).to(self.dtype)
        if self.kind == "int4":
            y = torch.ops.aten._weight_int4pack_mm_for_cpu(x2, self.packed, GROUP, self.scale_zero)
        else:
            y = torch.ops.aten._weight_int8pack_mm(x2, self.q8, self.scale)
        y = y.reshape(*shape[:-1], self.out_features)
        return y + self.bias if self.bias is not None else y

    def extra_repr(self) -> str:
        return f"{self.in_features}->{self.out_features}, {self.kind}, {self.dtype}"


class QuantEmbedding(torch.nn.Module):
    """Token embeddings kept quantized: only the looked-up rows are dequantized."""

    def __init__(self, weight: QuantWeight, dtype: torch.dtype) -> None:
        super().__init__()
        self.num_embeddings, self.embedding_dim = weight.q.shape
        self.dtype = dtype
        if isinstance(weight, Int4Weight):
            self.register_buffer("q4", weight.pack()["q4"])  # two codes per byte
            self.register_buffer("scale", weight.scale)
            self.register_buffer("minimum", weight.minimum)
        else:
            self.register_buffer("q8", weight.q.contiguous())
            self.register_buffer("scale", weight.scale)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        scale = self.scale[ids]
        if hasattr(self, "q8"):
            return (self.q8[ids].float() * scale[..., None]).to(self.dtype)
        packed = self.q4[ids]
        codes = torch.stack([packed & 0x0F, packed >> 4], dim=-1).float()
        groups = codes.reshape(*ids.shape, -1, GROUP)
        out = groups * scale[..., None] - self.minimum[ids][..., None]
        return out.flatten(-2).to(self.dtype)
