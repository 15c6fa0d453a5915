"""A GGUF model the user already has, made into a pair: ``--model NAME|PATH``.

The target is the file itself, run as it is on the ggml backend (no conversion). Its prompt
tokens and stop tokens come from its own metadata (``gguf_info``); a model without
fill-in-the-middle tokens is prompted with the text before the cursor alone. A draft serves it when
their vocabularies are the same token list, compared by digest, not by name: the embedded
0.5B for any Qwen2.5-Coder target, since they share one vocabulary. The policy then measures
whether the draft pays, as for the embedded pair.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ..printable import printable
from .discovery import find_models
from .gguf_info import GgufInfo, read_gguf_info
from .manifests import DEFAULT_PAIR, ModelError, ModelSource, PairManifest, load_manifest
from .sources import gguf_file


def resolve_model(name_or_path: str, folders: tuple[str, ...] = ()) -> Path:
    """The GGUF file ``name_or_path`` names: a path, or a name ``codespec models`` lists."""
    as_path = Path(name_or_path).expanduser()
    if as_path.exists() or "/" in name_or_path and ":" not in name_or_path:
        if not as_path.is_file():
            raise ModelError(f"no model file at {as_path}")
        return as_path
    for found in find_models(folders):
        if found.name == name_or_path:
            return found.path
    raise ModelError(
        f"no model named {name_or_path!r} here; `codespec models` lists the ones found"
    )


def embedded_drafts() -> list[tuple[GgufInfo, ModelSource]]:
    """The embedded models that can draft, smaller first ([] when the default pair is not
    installed)."""
    default = load_manifest(DEFAULT_PAIR)
    drafts = []
    for source in (default.draft, default.target):
        if source is None:
            continue
        try:
            drafts.append((read_gguf_info(gguf_file(source, default.install_hint)), source))
        except ModelError:
            continue
    return drafts


def paired_draft(
    info: GgufInfo, drafts: list[tuple[GgufInfo, ModelSource]] | None = None
) -> ModelSource | None:
    """The model that drafts for ``info``'s: the smallest embedded one with the same
    vocabulary and fewer parameters (None when there is none)."""
    for own, source in embedded_drafts() if drafts is None else drafts:
        if own.vocabulary == info.vocabulary and own.parameters < info.parameters:
            return source
    return None


def manifest_for_model(
    name_or_path: str,
    folders: tuple[str, ...] = (),
    use_draft: bool = True,
    draft_name: str | None = None,
) -> PairManifest:
    """A pair whose target is the user's GGUF file (the module's docstring); ``draft_name``
    names its draft instead of the one paired by vocabulary."""
    path = resolve_model(name_or_path, folders)
    info = read_gguf_info(path)
    draft = paired_draft(info) if use_draft and draft_name is None else None
    if use_draft and draft_name is not None:
        draft_path = resolve_model(draft_name, folders)
        draft_info = read_gguf_info(draft_path)
        if draft_info.vocabulary != info.vocabulary:
            raise ModelError(
                f"{draft_name} cannot draft for {name_or_path}: their vocabularies differ"
            )
        draft = as_source(draft_info, draft_path)
    default = load_manifest(DEFAULT_PAIR)
    target = as_source(info, path)
    if not Path(name_or_path).expanduser().is_file():  # a store's name: the one users pick
        target = replace(target, label=printable(name_or_path))
    return replace(
        default,
        name=name_or_path,
        description=printable(
            f"{info.name} ({info.architecture}, {info.quantization}, from {path})"
        ),
        target=target,
        draft=draft,
        tokens=info.tokens,
        path=None,
        engine={},
    )


def as_source(info: GgufInfo, path: Path) -> ModelSource:
    return ModelSource(
        source="gguf", label=info.name, path=str(path), size=info.bytes, gguf_name=path.name
    )


def pair_named(
    pair: str, model: str | None, folders: tuple[str, ...] = (), draft: str | None = None
) -> str | PairManifest:
    """What the command line names: ``--model``'s pair (with ``--draft-model``'s draft) if
    given, else the ``--pair`` name."""
    if draft and not model:
        raise ModelError("--draft-model drafts for a --model (or [model] name) only")
    return manifest_for_model(model, folders, draft_name=draft) if model else pair


# What llama.cpp holds beside the weights and the K/V cache (its compute buffers, the batch,
# the logits of a wide pass) and what the daemon itself needs: a margin, not a measurement.
OVERHEAD_BYTES = 768 << 20


def check_memory(models: list[GgufInfo], cells: int, available: int | None = None) -> str:
    """What loading ``models`` will take, as one line; ``ModelError`` when the machine's
    available memory cannot hold it (weights are read into memory, not mapped)."""
    import psutil

    weights = sum(m.bytes for m in models)
    cache = sum(m.cache_bytes(cells) for m in models)
    need = weights + cache + OVERHEAD_BYTES
    free = psutil.virtual_memory().available if available is None else available
    line = (
        f"about {need / 2**30:.1f} GiB: {weights / 2**30:.1f} GiB of weights, "
        f"{cache / 2**30:.2f} GiB of K/V cache for {cells} tokens; {free / 2**30:.1f} GiB free"
    )
    if need > free:
        raise ModelError(f"{models[0].name} does not fit in memory: it needs {line}")
    return line
