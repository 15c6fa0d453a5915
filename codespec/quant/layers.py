"""Weight-only quantized layers for the CPU, over torch's own kernels.

Two stored forms, both plain tensors (safetensors, never pickle):

* ``Int4Weight``: 4-bit codes ``q`` in 0..15 with one affine pair per group of 32 inputs::

      w = scale * q - minimum          (GGUF's Q4_K sub-blocks have exactly this form)

  The kernel (``torch._weight_int4pack_mm_for_cpu``, "tinygemm") wants the same thing written
  as ``w = (q - 8) * scale + zero``, so ``zero = 8 * scale - minimum``.
* ``Int8Weight``: int8 codes with one scale per output row: ``w = scale * q``
  (``torch._weight_int8pack_mm``).

``QuantLinear`` runs them with one of three kernels:

* ``int4``: int4 weights, float activations (tinygemm);
* ``int8``: int8 weights, float activations (``_weight_int8pack_mm``);
* ``w8a8``: int8 weights and int8 activations, integer dot products (fbgemm, through torch's
  quantized engine; on the CPUs measured, several times faster than the two above:
  ``docs/benchmarks.md``, "Measurements behind the code"). Each input row is rounded to 8 bits
  with its own scale::

      step = max|x_row| / 127,  x_row ~= step * a  with a in -127..127
      y_row = step * (a . q) * scale          (a . q summed exactly in int32)

  The weights get 8 bits (q in -127..127) where the kernel sums the products in int32 (AVX-512
  VNNI's ``vpdpbusd``), and 7 bits (q in -63..63) elsewhere: on AVX2 it multiplies unsigned
  8-bit inputs (a + 128) by signed 8-bit weights and adds pairs into int16 with saturation, and
  2 * 255 * 63 stays below 2^15 (torch's ``reduce_range`` takes the bit from the activations
  instead; on the real model that measured worse: activations have the outliers). Which one
  this machine's kernel does is probed once, on inputs that saturate int16 pairs
  (``w8a8_weight_levels``).

  Because the sum is exact integer arithmetic and the rounding uses only the row itself, a
  row's result is the same bits in a pass of any width.

  Inputs with heavy tails lose most to that rounding (the MLP's ``down_proj`` sees rows whose
  largest value is many times their root mean square). Such a layer can take its input in two 8-bit
  digits: the row rounded as above, and what the rounding left, scaled by 254 and rounded again::

      x_row / step = hi + lo / 254      hi, lo in -127..127   (error ~1/254 of one digit's)
      y_row = step * ((hi . q) + (lo . q) / 254) * scale

  Both digits go through the kernel as rows of one call, so a one-row pass reads the weights
  once: while a pass is bound by memory bandwidth the second digit costs little; where it is
  bound by arithmetic (prefill) the layer costs twice as much.

``QuantEmbedding`` gathers rows of int4/int8 tables and dequantizes just those. Every kernel
computes each output row from its own input row only, so a position's result does not depend
on how many rows its pass had (checked at load, see ``kernels.py``): that is what keeps
speculative verification bit-identical to plain decoding.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
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
        groups = self.q.reshape(n, k // GROUP, GROUP).float()  # a new tensor: worked in place
        return groups.mul_(self.scale[..., None]).sub_(self.minimum[..., None]).reshape(n, k)

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
    # set when the codes were made by ``quantize_int8(..., levels)``: each row's largest code is
    # +-levels (or the row is zero), so requantizing to those levels would change nothing
    levels: int | None = None

    def dequantize(self) -> torch.Tensor:
        return self.q.float().mul_(self.scale[:, None])

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


def quantize_int8(weight: torch.Tensor, levels: int = 127) -> Int8Weight:
    """Symmetric 8-bit quantization with one scale per output row (codes in -levels..levels)."""
    w = weight.float()
    scale = (w.abs().amax(1) / levels).clamp(min=1e-12)
    # in place on the quotient: a block of rows is tens of MB, and each new float32 temporary
    # of that size is fresh pages to fault in (twice the time of the arithmetic when loading)
    q = (w / scale[:, None]).round_().clamp_(-levels, levels).to(torch.int8)
    return Int8Weight(q, scale, levels)


def requantize_int8(weight: QuantWeight, levels: int, rows: int = 2048) -> Int8Weight:
    """``quantize_int8`` of the dequantized weight, a block of rows at a time into one output
    (the LM head in float32 would be the whole vocabulary times the hidden size at once, and
    its blocks plus their concatenation as many int8 codes again). An int8 weight already
    quantized to ``levels`` (its ``levels`` says so) is returned as it is: requantizing it
    gives the same codes and scales again."""
    if isinstance(weight, Int8Weight) and weight.levels == levels:
        return weight
    n, k = weight.q.shape
    out = Int8Weight(
        torch.empty(n, k, dtype=torch.int8), torch.empty(n, dtype=torch.float32), levels
    )
    for i in range(0, n, rows):
        block = quantize_int8(_rows(weight, i, i + rows).dequantize(), levels)
        out.q[i : i + rows], out.scale[i : i + rows] = block.q, block.scale
    return out


def _rows(weight: QuantWeight, start: int, stop: int) -> QuantWeight:
    if isinstance(weight, Int4Weight):
        return Int4Weight(
            weight.q[start:stop], weight.scale[start:stop], weight.minimum[start:stop]
        )
    return Int8Weight(weight.q[start:stop], weight.scale[start:stop], weight.levels)


def kernel_form(weight: QuantWeight, kind: str) -> QuantWeight:
    """The weight as kernel ``kind`` takes it: ``int8`` int8 weights as they are and int4 ones
    requantized to 8 bits; ``w8a8`` codes in ``-levels..levels`` (``w8a8_weight_levels``);
    ``int4`` as it is."""
    if kind in ("int8", "w8a8"):
        return int8_form(weight, kind)
    return weight


def int8_form(weight: QuantWeight, kind: str) -> Int8Weight:
    """The weight as the ``int8`` or ``w8a8`` kernel takes it (``kernel_form``)."""
    if kind == "w8a8":
        return requantize_int8(weight, w8a8_weight_levels())
    return weight if isinstance(weight, Int8Weight) else requantize_int8(weight, 127)


# The int4 kernel lays its packed weight out in blocks of output rows: 64 with AVX-512, 32 with
# AVX2. Converted in blocks of a multiple of this, the codes pack exactly as the whole does.
INT4_PACK_BLOCK = 64


def pack_int4(q: torch.Tensor, rows: int = 2048) -> torch.Tensor:
    """4-bit codes (N, K) in the int4 kernel's packed layout, (N, K / 2) bytes. The op takes
    int32 codes: converted ``rows`` at a time (a multiple of ``INT4_PACK_BLOCK``), the LM
    head's transient is a block's, not the whole head's (see ``tests/test_quant.py``)."""
    if rows % INT4_PACK_BLOCK:
        raise ValueError(f"int4 codes pack in blocks of {INT4_PACK_BLOCK} rows, not {rows}")
    n, k = q.shape
    out = torch.empty(n, k // 2, dtype=torch.uint8)
    for i in range(0, n, rows):
        out[i : i + rows] = torch.ops.aten._convert_weight_to_int4pack_for_cpu(
            q[i : i + rows].int(), 1
        )
    return out


def int4_fits(n: int, k: int) -> bool:
    """Shapes the CPU int4 kernel takes: whole groups along K, N a multiple of 16."""
    return k % GROUP == 0 and n % 16 == 0


def unpack_stored(stored: dict[str, torch.Tensor]) -> QuantWeight:
    """The weight from its stored tensors (keys ``q4*`` or ``q8*``)."""
    return Int4Weight.unpack(stored) if "q4" in stored else Int8Weight.unpack(stored)


# w8a8: a row's inputs become integers in -127..127, stored as uint8 around 128 (1..255)
ACTIVATION_LEVELS, ACTIVATION_ZERO = 127, 128
# the weights: integers in -127..127 where the kernel sums products in int32, else in -63..63,
# so that no pair of products overflows int16 (see above and ``w8a8_weight_levels``)
WIDE_WEIGHT_LEVELS, SAFE_WEIGHT_LEVELS = 127, 63


def prepack_w8a8(weight: Int8Weight):
    """The int8 weight in fbgemm's packed layout (the codes are not kept beside it); its codes
    must lie in ``-levels..levels`` for ``w8a8_weight_levels()``."""
    n, _ = weight.q.shape
    with warnings.catch_warnings():  # quantized tensors are deprecated in name only in 2.x
        warnings.simplefilter("ignore")
        qweight = torch._make_per_channel_quantized_tensor(  # pyright: ignore[reportPrivateImportUsage]  (fbgemm's input has no public maker)
            weight.q, weight.scale.double(), torch.zeros(n, dtype=torch.long), 0
        )
        return torch.ops.quantized.linear_prepack(qweight, None)


# the second digit of a two-digit input: what rounding to the first left, times this
DIGIT_BASE = 2 * ACTIVATION_LEVELS


def w8a8_matmul(x: torch.Tensor, packed, digits: int = 1) -> torch.Tensor:
    """``x W^T`` for a prepacked int8 W, with each row of ``x`` rounded to 8 bits on its own
    scale (``digits=2``: to two 8-bit digits); float32 out. The op rounds ``x / step`` with a
    fixed scale 1 and zero point 128, sums in int32, and multiplies by W's row scales; the
    row's ``step`` is applied after."""
    x = x.float()
    # max|x_row| in one op: a decode pass makes 113 of these calls, and every op costs a few µs
    step = torch.linalg.vector_norm(x, float("inf"), dim=1, keepdim=True)
    step = step.clamp_(min=1e-30).div_(ACTIVATION_LEVELS)
    scaled = x / step
    if digits == 1:
        y = torch.ops.quantized.linear_with_input_q_dq_qweight_dq_output_fp32(
            scaled, 1.0, ACTIVATION_ZERO, packed
        )
        return y.mul_(step)
    hi = torch.round(scaled)  # whole numbers: the op's own rounding leaves them as they are
    lo = (scaled - hi).mul_(DIGIT_BASE)  # in -127..127; the op rounds it
    y = torch.ops.quantized.linear_with_input_q_dq_qweight_dq_output_fp32(
        torch.cat([hi, lo]), 1.0, ACTIVATION_ZERO, packed
    )
    y_hi, y_lo = y.split(x.shape[0])
    return y_lo.div_(DIGIT_BASE).add_(y_hi).mul_(step)


@functools.cache
def w8a8_available() -> bool:
    """Whether torch's quantized engine runs the w8a8 op here (fbgemm: x86 with AVX2)."""
    try:
        layer = prepack_w8a8(quantize_int8(torch.ones(16, 32), SAFE_WEIGHT_LEVELS))
        return bool(torch.isfinite(w8a8_matmul(torch.ones(2, 32), layer)).all())
    except (RuntimeError, NotImplementedError, AttributeError):
        return False


@functools.cache
def w8a8_weight_levels() -> int:
    """The widest weight codes (``WIDE_WEIGHT_LEVELS`` or ``SAFE_WEIGHT_LEVELS``) whose w8a8
    products this machine's kernel sums exactly (``sums_8bit_weights_exactly``)."""
    if w8a8_available() and sums_8bit_weights_exactly(w8a8_product):
        return WIDE_WEIGHT_LEVELS
    return SAFE_WEIGHT_LEVELS


def w8a8_weight_bits() -> int:
    """The bits of this machine's w8a8 weight codes, sign included (8 or 7)."""
    return w8a8_weight_levels().bit_length() + 1


def w8a8_product(x: torch.Tensor, weight: Int8Weight) -> torch.Tensor:
    """``x W^T`` through the w8a8 kernel, the weight packed on the spot (for probes)."""
    return w8a8_matmul(x, prepack_w8a8(weight))


def sums_8bit_weights_exactly(matmul: Callable[[torch.Tensor, Int8Weight], torch.Tensor]) -> bool:
    """Whether ``matmul(x, weight)`` (x times the int8 weight's codes, as ``w8a8_matmul`` does
    it) is the exact integer product for 8-bit weights on inputs where a kernel that adds pairs
    of products into int16 saturates: inputs at +127 (stored 255) times weights at +-127,
    2 * 255 * 127 > 2^15. Passes of 1 to 5 rows (kernels differ by row count)."""
    k = 256
    generator = torch.Generator().manual_seed(0)
    levels = WIDE_WEIGHT_LEVELS
    codes = torch.randint(-levels, levels + 1, (32, k), generator=generator)
    codes[0::4], codes[1::4] = levels, -levels
    weight = Int8Weight(codes.to(torch.int8), torch.ones(32), levels)
    for rows in range(1, 6):
        x = torch.randint(-127, 128, (rows, k), generator=generator)
        x[0::2] = 127
        x[:, 0] = 127  # each row's step is 1: the kernel sees these very integers
        exact = (x.long() @ codes.long().T).double()  # (< 2^24: float32 holds it exactly)
        if not torch.equal(matmul(x.float(), weight).double(), exact):
            return False
    return True


class QuantLinear(torch.nn.Module):
    """``y = x W^T + b`` with W int4 (group 32) or int8 (per row); activations in ``dtype``
    (``w8a8`` rounds them to ``digits`` 8-bit digits inside the layer, see the module's
    docstring)."""

    def __init__(
        self,
        weight: QuantWeight,
        bias: torch.Tensor | None,
        kind: str,
        dtype: torch.dtype,
        digits: int = 1,
    ) -> None:
        super().__init__()
        n, k = weight.q.shape
        self.in_features, self.out_features = k, n
        self.kind, self.dtype = kind, dtype
        if digits not in (1, 2):
            raise ValueError(f"an input takes one or two 8-bit digits, not {digits}")
        if digits == 2 and kind != "w8a8":
            raise ValueError(f"{kind} takes float inputs: no digits to choose ({digits})")
        self.digits = digits  # w8a8: the input in one 8-bit digit or two
        if kind == "int4":
            if not isinstance(weight, Int4Weight) or not int4_fits(n, k):
                raise ValueError(f"int4 kernel needs an int4 weight of fitting shape ({n}x{k})")
            self.register_buffer("packed", pack_int4(weight.q))
            zero = 8 * weight.scale - weight.minimum
            # (K // GROUP, N, 2): scale and zero per group and output, in the activation dtype
            pairs = torch.stack([weight.scale, zero], dim=-1).transpose(0, 1).contiguous()
            self.register_buffer("scale_zero", pairs.to(dtype))
        elif kind == "int8":
            w8 = int8_form(weight, kind)
            self.register_buffer("q8", w8.q.contiguous())
            self.register_buffer("scale", w8.scale.to(dtype))
        elif kind == "w8a8":
            # a TorchScript object, not a tensor: it is neither a buffer nor saved
            self.packed_w8a8 = prepack_w8a8(int8_form(weight, kind))
        else:
            raise ValueError(f"unknown kernel {kind!r}")
        self.bias = None if bias is None else torch.nn.Parameter(bias.to(dtype), False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x2 = x.reshape(-1, shape[-1]).to(self.dtype)
        if self.kind == "int4":
            y = torch.ops.aten._weight_int4pack_mm_for_cpu(x2, self.packed, GROUP, self.scale_zero)
        elif self.kind == "int8":
            y = torch.ops.aten._weight_int8pack_mm(x2, self.q8, self.scale)
        else:
            y = w8a8_matmul(x2, self.packed_w8a8, self.digits).to(self.dtype)
        y = y.reshape(*shape[:-1], self.out_features)
        return y.add_(self.bias) if self.bias is not None else y  # y is the kernel's own output

    def extra_repr(self) -> str:
        digits = ", input in two 8-bit digits" if self.digits == 2 else ""
        return f"{self.in_features}->{self.out_features}, {self.kind}, {self.dtype}{digits}"


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
        scale = _rows_of(self.get_buffer("scale"), ids)
        if hasattr(self, "q8"):
            rows = _rows_of(self.get_buffer("q8"), ids).float()
            return (rows * scale[..., None]).to(self.dtype)
        packed = _rows_of(self.get_buffer("q4"), ids)
        codes = torch.stack([packed & 0x0F, packed >> 4], dim=-1).float()
        groups = codes.reshape(*ids.shape, -1, GROUP)
        out = groups * scale[..., None] - _rows_of(self.get_buffer("minimum"), ids)[..., None]
        return out.flatten(-2).to(self.dtype)


def _rows_of(table: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """``table[ids]`` by ``index_select``: advanced indexing into a vocabulary-sized table is
    several times slower for the few ids of a decoding pass."""
    return table.index_select(0, ids.reshape(-1)).reshape(*ids.shape, *table.shape[1:])
