"""One GEMM for the projections that read the same input: q/k/v, and the MLP's gate/up.

A one-row decode pass calls many small quantized linear layers, and each call has a fixed cost
(rounding the input row, the kernel's setup, Python) on top of reading its weights; fusing the
projections that share an input removes over a third of the calls (``docs/benchmarks.md``,
"Measurements behind the code", Fusion).

Hugging Face's modules call ``q_proj(x)``, ``k_proj(x)`` and ``v_proj(x)`` one after another on
the same tensor (and ``gate_proj(x)``, ``up_proj(x)``). Each of those becomes a ``FusedPart``
that asks the shared ``FusedLinear`` for its slice of the output: the first call for an input
computes every slice, and the others read them. The model's own forward code is unchanged.

Every output column of a fused layer is the same dot product as in the separate layer (the
weights are the rows of the parts stacked, with the same per-row scales), so fusing changes
the cost of a pass, not what a row computes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping

import torch

from .layers import (
    Int4Weight,
    Int8Weight,
    QuantLinear,
    QuantWeight,
    int8_form,
)

FUSE_GROUPS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))


class FusedLinear(torch.nn.Module):
    """A linear layer whose output is the parts' outputs side by side."""

    def __init__(self, layer: QuantLinear, sizes: list[int]) -> None:
        super().__init__()
        self.layer, self.sizes = layer, sizes
        self._input: torch.Tensor | None = None  # held, so its identity cannot be reused
        self._outputs: tuple[torch.Tensor, ...] = ()

    def part(self, x: torch.Tensor, index: int) -> torch.Tensor:
        if x is not self._input:
            self._outputs = self.layer(x).split(self.sizes, dim=-1)
            self._input = x
        out = self._outputs[index]
        if index == len(self.sizes) - 1:  # the last part was read: hold nothing between passes
            self._input, self._outputs = None, ()
        return out


class FusedPart(torch.nn.Module):
    """What stands where one of the fused projections was."""

    def __init__(self, fused: FusedLinear, index: int) -> None:
        super().__init__()
        self.fused, self.index = fused, index
        self.out_features = fused.sizes[index]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fused.part(x, self.index)


def stacked(weights: list[QuantWeight], kernel: str) -> QuantWeight | None:
    """The parts' weights as one (rows stacked), in a form ``kernel`` takes; None if there is
    none (int4 parts stored in different forms)."""
    if kernel in ("int8", "w8a8"):
        # per-row scales: the parts in the kernel's form, one by one, are the rows of the whole
        parts = [int8_form(w, kernel) for w in weights]
        same = {p.levels for p in parts}
        return Int8Weight(
            torch.cat([p.q for p in parts]),
            torch.cat([p.scale for p in parts]),
            same.pop() if len(same) == 1 else None,
        )
    int4 = [w for w in weights if isinstance(w, Int4Weight)]
    if len(int4) == len(weights):
        return Int4Weight(
            torch.cat([w.q for w in int4]),
            torch.cat([w.scale for w in int4]),
            torch.cat([w.minimum for w in int4]),
        )
    return None


def fusion_builds(
    model: torch.nn.Module,
    weights: Mapping[str, QuantWeight | torch.Tensor],
    kernel_for: Callable[[str, QuantWeight], str],
    dtype: torch.dtype,
) -> list[Callable[[], Callable[[], None] | None]]:
    """One build for each group of ``FUSE_GROUPS`` found in ``model`` (as ``nn.Linear``s of one
    module): it reads the parts' weights and makes their fused layer, and returns what puts
    the ``FusedPart``s in place, or None where the group does not fuse (a part not quantized,
    parts on different kernels, mixed biases). Builds may run side by side (``load.py``);
    what they return is run afterwards, one after another."""
    builds = []
    for prefix, module in list(model.named_modules()):
        for group in FUSE_GROUPS:
            if all(isinstance(getattr(module, g, None), torch.nn.Linear) for g in group):
                builds.append(
                    functools.partial(_fuse, module, prefix, group, weights, kernel_for, dtype)
                )
    return builds


def _fuse(module, prefix, group, weights, kernel_for, dtype) -> Callable[[], None] | None:
    names = [f"{prefix}.{g}" if prefix else g for g in group]
    parts = [weights[f"{n}.weight"] for n in names]
    if any(isinstance(w, torch.Tensor) for w in parts):
        return None
    kernels = {kernel_for(n, w) for n, w in zip(names, parts, strict=True)}
    has_bias = [getattr(module, g).bias is not None for g in group]
    if len(kernels) != 1 or len(set(has_bias)) != 1:
        return None
    kernel = kernels.pop()
    weight = stacked(parts, kernel)
    if weight is None or (kernel == "int4" and weight.q.shape[0] % 16):
        return None
    bias = torch.cat([weights[f"{n}.bias"] for n in names]) if has_bias[0] else None
    fused = FusedLinear(QuantLinear(weight, bias, kernel, dtype), [w.q.shape[0] for w in parts])

    def put_in_place() -> None:
        for i, g in enumerate(group):
            setattr(module, g, FusedPart(fused, i))

    return put_in_place
