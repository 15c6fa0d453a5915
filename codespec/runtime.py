"""A loaded pair: target + draft on a device, their tokenizer, and an engine over them.

This is the bridge between the model store (files) and the engine (token ids). The CLI, the
daemon and the benchmark all start here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from .engine import CachedModel, Engine, SpeculationPolicy
from .models import (
    ModelError,
    PairManifest,
    Progress,
    choose_device_dtype,
    load_causal_lm,
    load_manifest,
    load_tokenizer,
    resolve_source,
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

    @property
    def model_label(self) -> str:
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
) -> LoadedPair:
    """Prepare (once) and load a pair, and build its engine."""
    manifest = load_manifest(pair) if isinstance(pair, str) else pair
    target_dir = resolve_source(manifest.target, manifest.install_hint, progress)
    draft_dir = None
    if use_draft and manifest.draft is not None:
        draft_dir = resolve_source(manifest.draft, manifest.install_hint, progress)
    device, dtype = choose_device_dtype(manifest.dtype, device)
    t0 = time.perf_counter()
    tokenizer = load_tokenizer(target_dir)
    target = load_causal_lm(target_dir, device, dtype)
    draft = load_causal_lm(draft_dir, device, dtype) if draft_dir else None
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
    engine.calibrate()
    return LoadedPair(
        manifest=manifest,
        engine=engine,
        tokenizer=tokenizer,
        device=device,
        dtype=str(dtype).removeprefix("torch."),
        load_s=load_s,
        stop_ids=stop_ids,
    )
