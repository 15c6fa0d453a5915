"""A loaded pair: target + draft on a device, their tokenizer, and an engine over them.

This is the bridge between the model store (files) and the engine (token ids). The CLI, the
daemon and the benchmark all start here.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import draft_verdict
from .engine import CachedModel, Engine, SpeculationPolicy
from .memory import return_freed_memory
from .models import (
    ModelError,
    ModelSource,
    PairManifest,
    Progress,
    choose_device,
    choose_device_dtype,
    load_causal_lm,
    load_manifest,
    load_quantized_lm,
    load_tokenizer,
    quantize_mode,
    resolve_source,
    uses_quantized_form,
)


@dataclass
class LoadedPair:
    """Everything needed to complete code with one model pair."""

    manifest: PairManifest
    engine: Engine
    tokenizer: Any
    device: str
    dtype: str
    load_s: float
    stop_ids: set[int]
    quantization: str = "off"  # what runs the linear layers, and why (see quant/kernels.py)
    context_tokens: int = 32768  # the target's context: a prompt and its completion fit in it

    @property
    def model_label(self) -> str:
        if self.device == "remote":
            return self.engine.label  # type: ignore[attr-defined]  (hosts and model name)
        return self.manifest.target.label


def token_id(tokenizer: Any, text: str) -> int:
    """The id of a special token given as text; raise if the vocabulary lacks it."""
    tid = tokenizer.convert_tokens_to_ids(text)
    if tid is None or tid == tokenizer.unk_token_id:
        raise ModelError(f"the tokenizer has no token {text!r}")
    return int(tid)


def load_pair(
    pair: str | PairManifest = "qwen2.5-coder-1.5b",
    device: str | None = None,
    use_draft: bool = True,
    draft_mode: str = "auto",
    progress: Progress = print,
    quantize: str | None = None,
) -> LoadedPair:
    """Prepare (once) and load a pair, and build its engine.

    ``quantize`` overrides the manifest's ``[quantize]`` choice for the device (see
    ``models.quantize_mode``): on the CPU the default pair runs weight-only int4/int8."""
    manifest = load_manifest(pair) if isinstance(pair, str) else pair
    device = choose_device(device)
    mode = quantize_mode(manifest, device, quantize)
    sources = [manifest.target]
    verdict = draft_verdict.verdict_file(manifest, device, mode)
    skipped = draft_verdict.cached_note(verdict) if use_draft and draft_mode == "auto" else None
    if use_draft and manifest.draft is not None and skipped is None:
        sources.append(manifest.draft)
    folders = [prepared_folder(manifest, src, mode, progress) for src in sources]
    t0 = time.perf_counter()
    tokenizer = load_tokenizer(folders[0])
    loaded = [
        _load_model(src, folder, mode, manifest.dtype, device)
        for src, folder in zip(sources, folders, strict=True)
    ]
    models = [model for model, _, _ in loaded]
    summaries = [summary for _, summary, _ in loaded if summary]
    dtype = loaded[0][2]
    del loaded  # it holds the models too: the draft must go when the engine releases it
    target, draft = models[0], (models[1] if len(models) > 1 else None)
    context_tokens = int(getattr(target.config, "max_position_embeddings", 0) or 32768)
    if draft is not None and draft.config.vocab_size > target.config.vocab_size:
        raise ModelError("the draft's vocabulary is larger than the target's: not a pair")
    load_s = time.perf_counter() - t0
    stop_ids = {token_id(tokenizer, t) for t in manifest.tokens.stop}
    if tokenizer.eos_token_id is not None:
        stop_ids.add(int(tokenizer.eos_token_id))
    policy = SpeculationPolicy(draft_mode=draft_mode if draft is not None else "off")
    engine = Engine(
        CachedModel(target),
        CachedModel(draft) if draft is not None else None,
        stop_ids=stop_ids,
        policy=policy,
    )
    del models, target, draft  # the engine holds what it keeps (it may release the draft)
    if draft_mode == "auto":  # released now or after some requests: later starts skip it
        engine.on_draft_released = functools.partial(draft_verdict.remember, verdict)
    engine.calibrate()
    return_freed_memory(collect=True)  # what loading freed (a released draft among it)
    if skipped:
        engine.draft_note = (
            f"draft not loaded: an earlier start measured that {skipped} (--draft on loads it)"
        )
    notes = [n for n in ("; ".join(summaries), engine.draft_note) if n]
    return LoadedPair(
        manifest=manifest,
        engine=engine,
        tokenizer=tokenizer,
        device=device,
        dtype=str(dtype).removeprefix("torch."),
        load_s=load_s,
        stop_ids=stop_ids,
        quantization="; ".join(notes) or "off",
        context_tokens=context_tokens,
    )


def load_remote_pair(
    config: Any, pair: str | PairManifest = "qwen2.5-coder-1.5b", progress: Progress = print
) -> LoadedPair:
    """A pair whose decoding runs on a remote engine (``remote/``): only the tokenizer and the
    FIM tokens are local, from the pair's target (its model family's tokenizer)."""
    from .remote.engine import RemoteEngine

    manifest = load_manifest(pair) if isinstance(pair, str) else pair
    mode = quantize_mode(manifest, "cpu")
    folder = prepared_folder(manifest, manifest.target, mode, progress)
    t0 = time.perf_counter()
    tokenizer = load_tokenizer(folder)
    stop_ids = {token_id(tokenizer, t) for t in manifest.tokens.stop}
    engine = RemoteEngine(config, tokenizer)
    return LoadedPair(
        manifest=manifest,
        engine=engine,  # type: ignore[arg-type]  (the generator seam: generator.py)
        tokenizer=tokenizer,
        device="remote",
        dtype="",
        load_s=time.perf_counter() - t0,
        stop_ids=stop_ids,
        quantization=engine.label,
    )


def _load_model(
    src: ModelSource, folder: Path, mode: str, dtypes: dict[str, str], device: str
) -> tuple[Any, str, Any]:
    """One model of the pair: (model, what runs its layers, its activation dtype)."""
    if uses_quantized_form(src, mode):
        model, plan = load_quantized_lm(folder, src, mode)
        return model, f"{src.label}: {plan.summary()}", plan.torch_dtype
    device, dense_dtype = choose_device_dtype(dtypes, device)
    return load_causal_lm(folder, device, dense_dtype), "", dense_dtype


def prepared_folder(
    manifest: PairManifest, src: ModelSource, mode: str = "auto", progress: Progress = print
) -> Path:
    """The folder of one of the pair's models in the form ``mode`` runs it in (prepared once:
    parts joined, verified, converted)."""
    return resolve_source(src, manifest.install_hint, progress, form=prepared_form(src, mode))


def prepared_form(src: ModelSource, mode: str) -> str:
    """The prepared form a source needs: GGUF sources have a quantized form of their own."""
    return "quantized" if src.source == "pypi-parts" and uses_quantized_form(src, mode) else "bf16"
