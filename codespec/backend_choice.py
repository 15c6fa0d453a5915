"""Which backend runs a GGUF pair's target exactly on this CPU: measured once per machine,
then read.

Without ``--exact``, ``auto`` runs ggml, whose fastest kernels beat torch's on every kind of
CPU measured (``runtime.choose_backend``). With ``--exact`` every ggml pass is padded to whole
row groups, which costs more on some CPUs than torch's int4/int8 kernels do (``docs/
benchmarks.md``, "ggml against torch"), so ``--backend auto --exact`` on a CPU with
llama-cpp-python installed times the target on both backends the first time and keeps the
figures beside the kernel plans, keyed by the processor, its kernel flags, the kernels'
packages and the cores (``machine.machine_fingerprint``), by the target file and by whether
ggml ran exact. A later start reads them. Deleting the file measures again.

What is compared: a small request after ``CONTEXT`` cached tokens, its prompt's new tokens
prefilled and a few tokens decoded (``_price``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from .engine.timing import pass_seconds
from .files import read_keyed, write_keyed
from .machine import machine_fingerprint
from .models import PairManifest, Progress, cache_root

CONTEXT = 512
PREFILL = 64
STEPS = 16
BACKENDS = ("ggml", "torch")


def verdict_file(manifest: PairManifest, exact: bool) -> Path:
    mode = "-exact" if exact else ""
    return cache_root() / "kernels" / f"backend-{manifest.target.sha256[:16]}{mode}.json"


def cached(manifest: PairManifest, exact: bool) -> dict | None:
    """This machine's measured prices (seconds per backend), or None."""
    prices = read_keyed(verdict_file(manifest, exact), machine_fingerprint())
    if not isinstance(prices, dict):
        return None
    ok = all(isinstance(prices.get(b), int | float) and prices[b] > 0 for b in BACKENDS)
    return prices if ok else None


def faster(prices: dict) -> str:
    return min(BACKENDS, key=lambda backend: prices[backend])


def measure(
    manifest: PairManifest,
    progress: Progress,
    loaders: dict[str, Callable[[], object]],
    exact: bool,
) -> dict:
    """Time the target on both backends and remember it. ``loaders`` maps each backend to a
    function that loads the target on it (the runtime's, which knows how each is prepared);
    they run one after the other so only one copy of the weights is resident at a time."""
    progress("timing the target on ggml and on torch (once on this machine)")
    prices = {}
    for backend in BACKENDS:
        target = loaders[backend]()
        prices[backend] = _price(target)
        close = getattr(target, "close", None)
        if close is not None:
            close()
        del target
    figures = {b: round(prices[b], 4) for b in BACKENDS}
    write_keyed(verdict_file(manifest, exact), machine_fingerprint(), figures)
    return prices


def _price(target) -> float:
    """Seconds of a small request after ``CONTEXT`` cached tokens: ``PREFILL`` new prompt
    tokens, then ``STEPS`` one-token decoding steps (speculation's wider passes cost the two
    backends in about the same proportion: ``docs/benchmarks.md``, "ggml against torch")."""
    vocab = target.vocab_size
    ids = [(7 * i + 100) % vocab for i in range(CONTEXT + PREFILL)]
    step = pass_seconds(target, ids[:CONTEXT], ids[:1], repeats=5)
    target.prefill(ids[:CONTEXT])
    t0 = time.perf_counter()
    target.prefill(ids)
    prefill = time.perf_counter() - t0
    target.reset()
    return STEPS * step + prefill


def target_loaders(manifest: PairManifest, progress: Progress, exact: bool) -> dict:
    """The pair's target, loaded alone on each CPU backend (for ``measure``)."""
    from .ggml.backend import GgmlModel
    from .models import gguf_file, load_model, prepared_folder
    from .torch_backend.kvcache import CachedModel

    src = manifest.target
    path = gguf_file(src, manifest.install_hint)  # a missing model fails here, in one line

    def on_ggml():
        return GgmlModel(str(path), padded=exact)

    def on_torch():
        folder = prepared_folder(manifest, src, "auto", progress)
        model, _, _ = load_model(src, folder, "auto", manifest.dtype, "cpu")
        target = CachedModel(model)
        target.use_width_independent_rows()
        return target

    return {"ggml": on_ggml, "torch": on_torch}
