"""llama.cpp through its low-level C API: one model, one context, its batch.

What ``backend.py`` needs and nothing more: load a GGUF file, decode a batch of tokens (each
at a position, in one or more sequences) and read back the logits of the rows asked for, edit
which sequences the K/V cells belong to, save a sequence's cells to bytes and restore them, and
stop a pass between two graph nodes (an abort callback).

The settings that make rows exact are chosen by the caller (``backend.py`` says why); this
module only applies them, on the library the caller names (mainline or ik_llama.cpp:
``libraries.py``). llama.cpp's own log lines go to Python's logging (``codespec.llama``), silent
unless configured.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .libraries import LOG, LibraryError, open_library

__all__ = ["LOG", "LlamaContext", "LlamaError", "Settings"]


class LlamaError(Exception):
    """llama.cpp refused something (a file, a context, a batch); the message says what."""


@dataclass(frozen=True)
class Settings:
    """How the context runs: what ``backend.py`` chose, and the sizes."""

    # cells of the K/V cache: a quarter is for parked tree nodes (``backend.py``); the prompt
    # windows' defaults and a completion fit the rest (``server/config.py``)
    n_ctx: int = 4096
    n_batch: int = 256  # rows of a pass at most (prefill chunks are cut to it)
    n_seq_max: int = 20  # sequences: the text, a tree's leaves, parked and padding rows
    repack: bool = True  # llama.cpp's repacked weight layouts (its GEMV/GEMM kernels)
    flash_attention: bool = True
    kv_type: str = "f16"
    threads: int = 0  # 0: one per core
    library: str = "llama.cpp"  # whose kernels run it (``libraries.py``)
    # Read the file into llama.cpp's buffers rather than map it: the repacked tensors are
    # copies, and a mapped file would keep the pages read for them resident beside those
    # copies (``docs/benchmarks.md``, "Memory on ggml").
    mmap: bool = False


Node = tuple[int, int, tuple[int, ...], bool]  # token, position, sequences, logits wanted


class LlamaContext:
    """A loaded GGUF model and one context over it (a unified K/V cache: one batch may hold
    tokens of several sequences that share cells), on the library ``settings.library`` names
    (``libraries.py``)."""

    def __init__(self, path: str, settings: Settings = Settings()) -> None:
        try:
            lib = open_library(settings.library)
        except LibraryError as exc:
            raise LlamaError(str(exc)) from None
        self.lib = lib
        self.settings = settings
        self.model = lib.load_model(path, settings.repack, settings.mmap)
        if not self.model:
            raise LlamaError(f"{lib.name} could not load {path}")
        self.threads = settings.threads or os.cpu_count() or 1
        fields = dict(
            n_ctx=settings.n_ctx,
            n_batch=settings.n_batch,
            n_ubatch=settings.n_batch,
            n_seq_max=settings.n_seq_max,
            n_threads=self.threads,
            n_threads_batch=self.threads,
        )
        self.ctx = lib.new_context(self.model, fields, settings.flash_attention, settings.kv_type)
        if not self.ctx:
            lib.free_model(self.model)
            raise LlamaError(f"{lib.name} could not make a context (out of memory?)")
        self.n_vocab = lib.n_vocab(self.model)
        self.n_ctx = lib.n_ctx(self.ctx)
        self.batch = lib.batch_init(settings.n_batch, settings.n_seq_max)
        self._abort = lib.abort_callback(self._should_abort)  # kept: C holds a pointer
        self._abort_when: Callable[[], bool] | None = None
        self._aborted = False  # (the pass running was told to stop)
        lib.set_abort(self.ctx, self._abort)

    def use_threads(self, n: int) -> None:
        """Run the next passes (decoding and prefill) on ``n`` threads."""
        if n != self.threads:
            self.lib.set_threads(self.ctx, n)
            self.threads = n

    def close(self) -> None:
        """Free the context and the model (their memory goes back at once)."""
        if getattr(self, "ctx", None):
            self.lib.batch_free(self.batch)
            self.lib.free_context(self.ctx)
            self.lib.free_model(self.model)
            self.ctx = self.model = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: the library may be gone already
            pass

    # -- passes ------------------------------------------------------------------------------

    def decode(
        self, nodes: list[Node], abort_when: Callable[[], bool] | None = None
    ) -> np.ndarray | None:
        """Decode ``nodes`` in one pass, in this order; return the logits of the rows that
        asked for them, (rows, vocab) float32, or None. ``abort_when`` is asked between graph
        nodes: once it says so the pass stops, llama.cpp drops the pass's cells, and this
        raises ``Aborted``."""
        if not 0 < len(nodes) <= self.settings.n_batch:
            raise LlamaError(f"a pass holds 1 to {self.settings.n_batch} rows, not {len(nodes)}")
        b = self.batch
        for i, (token, position, sequences, logits) in enumerate(nodes):
            b.token[i] = token
            b.pos[i] = position
            b.n_seq_id[i] = len(sequences)
            for j, seq in enumerate(sequences):
                b.seq_id[i][j] = seq
            b.logits[i] = logits
        b.n_tokens = len(nodes)
        self._abort_when = abort_when
        self._aborted = False
        try:
            status = self.lib.decode(self.ctx, b)
        finally:
            self._abort_when = None
        if status == 0 and self._aborted and not self.lib.reports_abort:
            # (ik_llama.cpp stops the graph where asked but ends the pass as if it had run,
            # its cells holding what was half computed: they are dropped here, as mainline
            # drops them)
            for _, position, sequences, _ in nodes:
                for seq in sequences:
                    self.remove(seq, position, position + 1)
            raise Aborted()
        if status == 2:
            raise Aborted()
        if status == 1:
            raise CacheFull()
        if status != 0:
            raise LlamaError(f"llama_decode failed ({status}) on {len(nodes)} rows")
        rows = sum(1 for node in nodes if node[3])
        if not rows:
            return None
        out = self.lib.logits(self.ctx)  # the asked rows, in batch order
        return np.ctypeslib.as_array(out, shape=(rows, self.n_vocab)).copy()

    def _should_abort(self, _data) -> bool:
        when = self._abort_when
        if when is not None and when():
            self._aborted = True
        return self._aborted

    # -- the cache's cells -------------------------------------------------------------------

    def remove(self, seq: int, start: int = -1, end: int = -1) -> None:
        """Take ``seq`` off the cells at positions [start, end) (-1: open); a cell no sequence
        holds any more is free."""
        self.lib.seq_rm(self.ctx, seq, start, end)

    def share(self, source: int, target: int, start: int = -1, end: int = -1) -> None:
        """Add ``target`` to the cells of ``source`` at positions [start, end) (metadata)."""
        self.lib.seq_cp(self.ctx, source, target, start, end)

    def clear(self) -> None:
        self.lib.clear(self.ctx)

    def save(self, seq: int) -> bytes:
        """The cells of ``seq`` (positions, keys, values) as bytes."""
        size = self.lib.state_size(self.ctx, seq)
        buf = (ctypes.c_uint8 * size)()
        written = self.lib.state_get(self.ctx, buf, size, seq)
        return ctypes.string_at(buf, written)  # (one copy: slicing the array makes a list)

    def restore(self, data: bytes, seq: int) -> None:
        """Put saved cells back under ``seq`` (into free cells, in their saved order)."""
        buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        if self.lib.state_set(self.ctx, buf, len(data), seq) == 0:
            raise CacheFull()


class Aborted(Exception):
    """A pass was stopped by its abort callback; its cells were dropped."""


class CacheFull(Exception):
    """No free cells for a pass (or a restore): the context's K/V cache is full."""
