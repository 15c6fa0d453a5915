"""Pair manifests: which target and draft a pair names, where their weights come from, and
the choices a manifest makes (device dtypes, CPU quantization, FIM tokens).
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import platformdirs

from ..files import FileError, parse_toml, read_text

REPO_MODELS_DIR = Path(__file__).resolve().parents[2] / "models"


# In a checkout `codespec/pairs` links to `models/`; a built wheel carries the files themselves.
PACKAGE_PAIRS_DIR = Path(__file__).resolve().parents[1] / "pairs"


DEFAULT_PAIR = "qwen2.5-coder-1.5b"


class ModelError(Exception):
    """A model cannot be found, prepared or loaded; the message says what to do."""


@dataclass(frozen=True)
class ModelSource:
    """Where one model of a pair comes from."""

    source: str  # "pypi-parts" | "hf-dir" | "hf-cache" | "gguf" (a user's file: --model)
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


Progress = Callable[[str], None]


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
