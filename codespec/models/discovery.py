"""The GGUF models already on this machine, where other tools keep them.

Stores looked in (each only if it exists), and the names their models get:

* Ollama (``$OLLAMA_MODELS``, else ``~/.ollama/models``): each manifest
  ``manifests/<registry>/<namespace>/<model>/<tag>`` names its model layer's blob
  ``blobs/sha256-<hex>``: ``ollama:<model>:<tag>`` (``<namespace>/<model>`` outside the
  library namespace);
* LM Studio (``~/.lmstudio/models``, ``~/.cache/lm-studio/models``):
  ``lmstudio:<publisher>/<repository>/<file>``;
* llama.cpp's download cache (``$LLAMA_CACHE``, else ``~/.cache/llama.cpp``):
  ``llamacpp:<file>``;
* the Hugging Face hub cache (``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else
  ``~/.cache/huggingface/hub``): ``hf:<org>/<name>/<file>`` from the newest snapshot;
* folders the user names: ``<path>``.

Reading is read-only and bounded: only regular ``.gguf`` files (and Ollama blobs its manifests
name) whose real path stays inside their store (the Hugging Face cache links snapshots to its
own blobs; a link out of a store is not followed), at most ``MAX_ENTRIES`` entries looked at per
store, and nothing but a manifest's JSON and a file's first bytes read here (``gguf_info``
reads the metadata). A split model (``-00001-of-00003.gguf``) is found by its first part, the
name llama.cpp loads it by; its other parts are not listed.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..files import FileError, parse_json, read_text
from .gguf_info import SPLIT_PART

MAX_ENTRIES = 20_000  # directory entries looked at per store
MAX_MANIFEST_BYTES = 64 * 1024
MIN_MODEL_BYTES = 1 << 20  # smaller "models" are tokenizer-only files, not worth listing
OLLAMA_MODEL_LAYER = "application/vnd.ollama.image.model"


@dataclass(frozen=True)
class FoundModel:
    name: str  # what --model takes
    store: str  # ollama | lmstudio | llamacpp | hf | folder
    path: Path  # the GGUF file itself


def stores(home: Path | None = None, env: dict[str, str] | None = None) -> list[tuple[str, Path]]:
    """(store, root) for each place looked in, in order."""
    env = dict(os.environ) if env is None else env
    home = home or Path.home()
    hf_home = Path(env["HF_HOME"]) if env.get("HF_HOME") else home / ".cache" / "huggingface"
    return [
        ("ollama", Path(env.get("OLLAMA_MODELS") or home / ".ollama" / "models")),
        ("lmstudio", home / ".lmstudio" / "models"),
        ("lmstudio", home / ".cache" / "lm-studio" / "models"),
        ("llamacpp", Path(env.get("LLAMA_CACHE") or home / ".cache" / "llama.cpp")),
        ("hf", Path(env.get("HF_HUB_CACHE") or hf_home / "hub")),
    ]


def find_models(
    folders: tuple[str, ...] = (), home: Path | None = None, env: dict[str, str] | None = None
) -> list[FoundModel]:
    """Every GGUF model found in the stores and ``folders``, each file once (the first name)."""
    found: dict[Path, FoundModel] = {}
    places = stores(home, env) + [("folder", Path(f).expanduser()) for f in folders]
    for store, root in places:
        finder = {"ollama": _ollama, "hf": _hf_cache}.get(store, _gguf_files)
        for model in finder(store, root):
            found.setdefault(model.path, model)
    return list(found.values())


def _inside(path: Path, root: Path) -> Path | None:
    """``path``'s real path if it is a regular model file inside ``root`` (links within the
    store are followed, none out of it); None otherwise."""
    try:
        real = Path(os.path.realpath(path))
        real.relative_to(os.path.realpath(root))
        info = os.stat(real)
    except (OSError, ValueError):
        return None
    if not stat.S_ISREG(info.st_mode) or info.st_size < MIN_MODEL_BYTES:
        return None
    return real


def _walk(root: Path, max_depth: int) -> Iterator[Path]:
    """Files below ``root`` (links to folders not entered), breadth first, bounded."""
    queue, seen = [(root, 0)], 0
    while queue:
        folder, depth = queue.pop(0)
        try:
            with os.scandir(folder) as listing:
                entries = sorted(listing, key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            seen += 1
            if seen > MAX_ENTRIES:
                return
            try:
                if entry.is_dir(follow_symlinks=False):
                    if depth < max_depth and not entry.name.startswith("."):
                        queue.append((Path(entry.path), depth + 1))
                    continue
            except OSError:
                continue
            yield Path(entry.path)


def _ggufs_below(folder: Path, store_root: Path, max_depth: int) -> Iterator[tuple[str, Path]]:
    """(path relative to ``folder``, real path) of each whole GGUF model file below it whose
    real path stays inside ``store_root``."""
    for path in _walk(folder, max_depth):
        if not path.name.lower().endswith(".gguf") or _later_part(path.name):
            continue
        real = _inside(path, store_root)
        if real is not None:
            yield path.relative_to(folder).as_posix(), real


def _later_part(name: str) -> bool:
    """Whether ``name`` is a split model's second or later part (its first part names it)."""
    match = SPLIT_PART.fullmatch(name)
    return match is not None and int(match["part"]) > 1


def _gguf_files(store: str, root: Path) -> Iterator[FoundModel]:
    for relative, real in _ggufs_below(root, root, max_depth=4):
        name = str(root / relative) if store == "folder" else f"{store}:{relative}"
        yield FoundModel(name, store, real)


def _hf_cache(store: str, root: Path) -> Iterator[FoundModel]:
    """The newest snapshot of each ``models--org--name`` repository."""
    try:
        repos = sorted(p for p in root.iterdir() if p.name.startswith("models--"))
    except OSError:
        return
    for repo in repos[:MAX_ENTRIES]:
        snapshots = repo / "snapshots"
        try:
            newest = max(snapshots.iterdir(), key=lambda p: p.stat().st_mtime)
        except (OSError, ValueError):
            continue
        repo_id = repo.name.removeprefix("models--").replace("--", "/")
        # (snapshots link to the repository's own blobs: inside it, followed)
        for relative, real in _ggufs_below(newest, repo, max_depth=2):
            yield FoundModel(f"hf:{repo_id}/{relative}", store, real)


def _ollama(store: str, root: Path) -> Iterator[FoundModel]:
    manifests = root / "manifests"
    for path in _walk(manifests, max_depth=4):
        parts = path.relative_to(manifests).parts
        if len(parts) != 4:  # registry / namespace / model / tag
            continue
        _registry, namespace, model, tag = parts
        if path.is_symlink():  # (a manifest is read only where it is)
            continue
        try:
            manifest = parse_json(read_text(path, MAX_MANIFEST_BYTES))
        except (FileError, ValueError):
            continue
        layers = manifest.get("layers") if isinstance(manifest, dict) else None
        for layer in layers if isinstance(layers, list) else []:
            if not isinstance(layer, dict) or layer.get("mediaType") != OLLAMA_MODEL_LAYER:
                continue
            digest = layer.get("digest")
            if not isinstance(digest, str) or not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
                continue
            real = _inside(root / "blobs" / digest.replace(":", "-"), root)
            if real is not None:
                shown = model if namespace == "library" else f"{namespace}/{model}"
                yield FoundModel(f"ollama:{shown}:{tag}", store, real)
