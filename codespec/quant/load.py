"""Build a Hugging Face causal LM whose linear layers and embeddings are quantized.

The model skeleton is made on the ``meta`` device (no memory), then every ``nn.Linear`` and
``nn.Embedding`` is replaced by its quantized counterpart and the remaining float parameters
(norms, biases) are assigned. Weights come either from a prepared folder of stored tensors
(``model.safetensors`` written by ``from_gguf.stored_tensors``) or from a dense model that is
quantized on the spot (a local Hugging Face folder, the tiny models of the tests).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

from ..memory import return_freed_memory
from .fusion import fusion_builds
from .layers import (
    Int4Weight,
    QuantEmbedding,
    QuantLinear,
    QuantWeight,
    int4_fits,
    kernel_form,
    quantize_int4,
    quantize_int8,
    unpack_stored,
    w8a8_weight_levels,
)

WEIGHTS_FILE = "model.safetensors"
STORED_SUFFIXES = ("q4", "q4_scale", "q4_min", "q8", "q8_scale")

# A kernel per linear layer: given the module name and its weight, "int4" or "int8".
KernelFor = Callable[[str, QuantWeight], str]


def default_kernel(name: str, weight: QuantWeight) -> str:
    """int4 where the weight is int4 and the kernel takes its shape, else int8."""
    n, k = weight.q.shape
    return "int4" if isinstance(weight, Int4Weight) and int4_fits(n, k) else "int8"


class StoredWeights(Mapping):
    """The weights of a prepared folder by parameter name, read one at a time on access
    (quantized ones rebuilt from their stored parts, floats as they are), so loading never
    holds more than one unpacked weight beside the model being built.

    The file is mapped only while a weight is read: a mapping held for the whole load counted
    every page read so far in the process's resident size, on top of the model itself
    (``docs/benchmarks.md``, "Measurements behind the code")."""

    def __init__(self, folder: Path) -> None:
        self._path = str(folder / WEIGHTS_FILE)
        self._parts: dict[str, list[str]] = {}
        with self._open() as file:
            for key in file.keys():
                base, _, suffix = key.rpartition(".")
                name = base if suffix in STORED_SUFFIXES else key
                self._parts.setdefault(name, []).append(key)

    def _open(self):
        from safetensors import safe_open

        return safe_open(self._path, framework="pt")

    def __getitem__(self, name: str) -> QuantWeight | torch.Tensor:
        keys = self._parts[name]
        with self._open() as file:
            # copies: a tensor that still pointed into the mapping would keep it
            tensors = {k: file.get_tensor(k).clone() for k in keys}
        if keys == [name]:
            return tensors[name]
        return unpack_stored({k.rpartition(".")[2]: t for k, t in tensors.items()})

    def __iter__(self):
        return iter(self._parts)

    def __len__(self) -> int:
        return len(self._parts)


def read_stored(folder: Path) -> StoredWeights:
    """The weights of a prepared folder (see ``StoredWeights``)."""
    return StoredWeights(folder)


def quantize_dense(
    state: Mapping[str, torch.Tensor], scheme: str = "int4"
) -> dict[str, QuantWeight | torch.Tensor]:
    """Quantize the 2-D weights of a dense state dict: int4 (where the shape allows) or int8."""
    out: dict[str, QuantWeight | torch.Tensor] = {}
    for name, tensor in state.items():
        if tensor.ndim == 2 and name.endswith(".weight"):
            n, k = tensor.shape
            use_int4 = scheme == "int4" and int4_fits(n, k)
            out[name] = quantize_int4(tensor) if use_int4 else quantize_int8(tensor)
        else:
            out[name] = tensor.detach().float()
    return out


# a weight this large (the embeddings, the LM head) is built alone, on a trimmed heap
LARGE_WEIGHT_ELEMENTS = 32 * 2**20
# Layers built at a time. Most of a layer's build is single ops that release the GIL (reading
# and requantizing its weight, and fbgemm's prepacking, which runs on one core and was the
# largest share of the build: ``docs/benchmarks.md``, "Measurements behind the code").
LOAD_WORKERS = 2

Build = Callable[[], Any]


def run_builds(builds: list[Build], alone: list[bool] | None = None) -> list[Any]:
    """The results of ``builds``, in order: ``LOAD_WORKERS`` at a time, and those marked
    ``alone`` one by one after them, each on a heap whose free pages were handed back first
    (the temporaries of the layers before it, freed but kept by the allocator, would
    otherwise add to its own)."""
    alone = alone or [False] * len(builds)
    results: list[Any] = [None] * len(builds)
    together = [i for i, a in enumerate(alone) if not a]
    with ThreadPoolExecutor(LOAD_WORKERS) as pool:
        for i, result in zip(together, pool.map(lambda i: builds[i](), together), strict=True):
            results[i] = result
    for i in (i for i, a in enumerate(alone) if a):
        return_freed_memory()
        results[i] = builds[i]()
    return results


def build_quantized(
    config,
    weights: Mapping[str, QuantWeight | torch.Tensor],
    dtype: torch.dtype,
    kernel_for: KernelFor = default_kernel,
    fuse: bool = True,
    digits_for: Callable[[str, QuantWeight], int] | None = None,
) -> torch.nn.Module:
    """A causal LM for ``config`` made from ``weights``; activations and floats in ``dtype``;
    with ``fuse``, projections that read the same input run as one layer (``fusion.py``);
    ``digits_for`` says which w8a8 layers take their input in two 8-bit digits (``layers.py``;
    fused groups take one). Each layer is built from its weight alone, so the order they are
    built in changes no bit of the model."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation="sdpa")
    w8a8_weight_levels()  # the kernel's probe, once, before layers that need it are built
    if fuse:  # the fused groups are no longer nn.Linear: the layer builds below pass them by
        for put_in_place in run_builds(fusion_builds(model, weights, kernel_for, dtype)):
            if put_in_place is not None:
                put_in_place()
    tied = getattr(config, "tie_word_embeddings", False)
    layers = [
        (name, module)
        for name, module in model.named_modules()
        if isinstance(module, (torch.nn.Linear, torch.nn.Embedding))
    ]
    builds = [
        functools.partial(_layer, name, module, weights, kernel_for, dtype, digits_for, tied)
        for name, module in layers
    ]
    large = [module.weight.numel() >= LARGE_WEIGHT_ELEMENTS for _, module in layers]
    for (name, _), new in zip(layers, run_builds(builds, alone=large), strict=True):
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, child, new)
    # what is left on the meta device: float parameters (norms) and computed buffers (rotary)
    for name, param in list(model.named_parameters()):
        if param.is_meta:
            value = weights[name]
            assert isinstance(value, torch.Tensor), name
            parent, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent), child, torch.nn.Parameter(value.to(dtype), False))
    for name, module in list(model.named_modules()):
        if any(b.is_meta for b in module.buffers(recurse=False)):
            parent, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent), child, type(module)(config=config))
    return model.eval()


def _layer(name, module, weights, kernel_for, dtype, digits_for, tied) -> torch.nn.Module:
    """The quantized layer that takes the place of ``module`` (an ``nn.Linear`` or
    ``nn.Embedding`` on the meta device), from its weight."""
    if isinstance(module, torch.nn.Embedding):
        weight = weights[f"{name}.weight"]
        assert not isinstance(weight, torch.Tensor), f"{name}.weight is not quantized"
        return QuantEmbedding(weight, dtype)
    key = "model.embed_tokens.weight" if tied and name == "lm_head" else f"{name}.weight"
    weight = weights[key]
    bias = weights.get(f"{name}.bias") if module.bias is not None else None
    assert not isinstance(weight, torch.Tensor), f"{key} is not quantized"
    digits = digits_for(name, weight) if digits_for else 1
    kernel = kernel_for(name, weight)
    weight = kernel_form(weight, kernel)  # (an int4 form is freed before packing)
    return QuantLinear(weight, bias, kernel, dtype, digits)
