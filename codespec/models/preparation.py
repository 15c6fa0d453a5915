"""Converting a joined GGUF once into the form torch runs: bf16 safetensors for a GPU, the
GGUF's own 4-bit blocks as int4 (and the rest as int8) for the CPU (``quant/from_gguf.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .manifests import Progress


def convert_gguf(folder: Path, gguf_name: str, progress: Progress) -> None:
    """Dequantize a GGUF file into bf16 safetensors + tokenizer files in the same folder."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    progress(f"dequantizing {gguf_name} (about a minute per GB on a small CPU)")
    tokenizer = AutoTokenizer.from_pretrained(str(folder), gguf_file=gguf_name)
    model: Any = AutoModelForCausalLM.from_pretrained(
        str(folder),
        gguf_file=gguf_name,
        dtype=torch.bfloat16,
        quantization_config=GgufConfig(dequantize=True),
    )
    model.save_pretrained(str(folder), safe_serialization=True)
    tokenizer.save_pretrained(str(folder))
    del model


def quantize_gguf(folder: Path, gguf_name: str, progress: Progress) -> None:
    """Write the GGUF file's weights as int4/int8 tensors, with config and tokenizer files."""
    from safetensors.torch import save_file
    from transformers import AutoConfig, AutoTokenizer

    from ..quant.from_gguf import stored_tensors
    from ..quant.load import WEIGHTS_FILE

    progress(f"quantized tensors from {gguf_name} (Q4_K blocks kept as int4, the rest int8)")
    AutoConfig.from_pretrained(str(folder), gguf_file=gguf_name).save_pretrained(str(folder))
    tokenizer = AutoTokenizer.from_pretrained(str(folder), gguf_file=gguf_name)
    tokenizer.save_pretrained(str(folder))
    save_file(stored_tensors(folder / gguf_name), str(folder / WEIGHTS_FILE))
