"""llama.cpp through llama-cpp-python's low-level API: one model, one context, its batch.

What ``backend.py`` needs and nothing more: load a GGUF file, decode a batch of tokens (each
at a position, in one or more sequences) and read back the logits of the rows asked for, edit
which sequences the K/V cells belong to, save a sequence's cells to bytes and restore them, and
stop a pass between two graph nodes (an abort callback).

The settings that make rows exact are chosen by the caller (``backend.py`` says why); this
module only applies them. llama.cpp's own log lines go to Python's logging (``codespec.llama``),
silent unless configured.
"""

from __future__ import annotations

import ctypes
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np


class LlamaError(Exception):
    """llama.cpp refused something (a file, a context, a batch); the message says what."""


# llama.cpp's log lines, by ggml's log levels (1 debug, 2 info, 3 warn, 4 error, 5: the line
# goes on). llama-cpp-python's own callback maps an older numbering, which prints warnings
# and hides errors, so codespec installs its own: everything goes to this logger, which is
# silent unless configured (what failed reaches the user as codespec's one line).
LOG = logging.getLogger("codespec.llama")
LOG.setLevel(logging.CRITICAL + 1)
LOG_LEVELS = {1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING, 4: logging.ERROR}
_log_callback = None  # (kept: C holds a pointer to it)
_last_level = logging.DEBUG


def import_llama():
    """The llama_cpp module, or a ``LlamaError`` saying how to install it."""
    global _log_callback
    try:
        import llama_cpp
    except ImportError as exc:  # (an OSError inside: the shared library did not load)
        raise LlamaError(
            f"llama-cpp-python is not installed ({exc}); scripts/setup.sh builds it"
        ) from None
    if _log_callback is None:
        _log_callback = llama_cpp.llama_log_callback(_log_line)
        llama_cpp.llama_log_set(_log_callback, ctypes.c_void_p(0))
    return llama_cpp


def _log_line(level: int, text: bytes, _user_data) -> None:
    global _last_level
    _last_level = LOG_LEVELS.get(level, _last_level)  # (5 and unknown: as the line before)
    if LOG.isEnabledFor(_last_level):
        LOG.log(_last_level, text.decode("utf-8", "replace").rstrip("\n"))


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
    # Read the file into llama.cpp's buffers rather than map it: the repacked tensors are
    # copies, and a mapped file would keep the pages read for them resident beside those
    # copies (``docs/benchmarks.md``, "Memory on ggml").
    mmap: bool = False


Node = tuple[int, int, tuple[int, ...], bool]  # token, position, sequences, logits wanted


class LlamaContext:
    """A loaded GGUF model and one context over it (a unified K/V cache: one batch may hold
    tokens of several sequences that share cells)."""

    def __init__(self, path: str, settings: Settings = Settings()) -> None:
        # llama-cpp-python's ctypes bindings: its pointers are checked for NULL where they are
        # made, and its integer types take Python ints, which its stubs do not say
        L: Any = import_llama()
        self.L = L
        L.llama_backend_init()
        self.settings = settings
        params = L.llama_model_default_params()
        _set(params, "use_extra_bufts", settings.repack)
        _set(
            params, "load_mode", L.LLAMA_LOAD_MODE_MMAP if settings.mmap else L.LLAMA_LOAD_MODE_NONE
        )
        self.model = L.llama_model_load_from_file(os.fsencode(path), params)
        if not self.model:
            raise LlamaError(f"llama.cpp could not load {path}")
        cp = L.llama_context_default_params()
        self.threads = settings.threads or os.cpu_count() or 1
        flash = (
            L.LLAMA_FLASH_ATTN_TYPE_ENABLED
            if settings.flash_attention
            else L.LLAMA_FLASH_ATTN_TYPE_DISABLED
        )
        kv = {"f16": L.GGML_TYPE_F16, "q8_0": L.GGML_TYPE_Q8_0}[settings.kv_type]
        for field, value in dict(
            n_ctx=settings.n_ctx,
            n_batch=settings.n_batch,
            n_ubatch=settings.n_batch,
            n_seq_max=settings.n_seq_max,
            n_threads=self.threads,
            n_threads_batch=self.threads,
            flash_attn_type=flash,
            kv_unified=True,
            type_k=kv,
            type_v=kv,
            no_perf=True,
        ).items():
            _set(cp, field, value)
        self.ctx = L.llama_init_from_model(self.model, cp)
        if not self.ctx:
            L.llama_model_free(self.model)
            raise LlamaError("llama.cpp could not make a context (out of memory?)")
        self.memory = L.llama_get_memory(self.ctx)
        self.n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(self.model))
        self.n_ctx = L.llama_n_ctx(self.ctx)
        self.batch = L.llama_batch_init(settings.n_batch, 0, settings.n_seq_max)
        self._abort = L.ggml_abort_callback(self._should_abort)  # kept: C holds a pointer
        self._abort_when: Callable[[], bool] | None = None
        L.llama_set_abort_callback(self.ctx, self._abort, None)

    def use_threads(self, n: int) -> None:
        """Run the next passes (decoding and prefill) on ``n`` threads."""
        if n != self.threads:
            self.L.llama_set_n_threads(self.ctx, n, n)
            self.threads = n

    def close(self) -> None:
        """Free the context and the model (their memory goes back at once)."""
        if getattr(self, "ctx", None):
            self.L.llama_batch_free(self.batch)
            self.L.llama_free(self.ctx)
            self.L.llama_model_free(self.model)
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
        try:
            status = self.L.llama_decode(self.ctx, b)
        finally:
            self._abort_when = None
        if status == 2:
            raise Aborted()
        if status == 1:
            raise CacheFull()
        if status != 0:
            raise LlamaError(f"llama_decode failed ({status}) on {len(nodes)} rows")
        rows = sum(1 for node in nodes if node[3])
        if not rows:
            return None
        out = self.L.llama_get_logits(self.ctx)  # the asked rows, in batch order
        return np.ctypeslib.as_array(out, shape=(rows, self.n_vocab)).copy()

    def _should_abort(self, _data) -> bool:
        when = self._abort_when
        return bool(when is not None and when())

    # -- the cache's cells -------------------------------------------------------------------

    def remove(self, seq: int, start: int = -1, end: int = -1) -> None:
        """Take ``seq`` off the cells at positions [start, end) (-1: open); a cell no sequence
        holds any more is free."""
        self.L.llama_memory_seq_rm(self.memory, seq, start, end)

    def share(self, source: int, target: int, start: int = -1, end: int = -1) -> None:
        """Add ``target`` to the cells of ``source`` at positions [start, end) (metadata)."""
        self.L.llama_memory_seq_cp(self.memory, source, target, start, end)

    def clear(self) -> None:
        self.L.llama_memory_clear(self.memory, True)

    def save(self, seq: int) -> bytes:
        """The cells of ``seq`` (positions, keys, values) as bytes."""
        size = self.L.llama_state_seq_get_size(self.ctx, seq)
        buf = (ctypes.c_uint8 * size)()
        written = self.L.llama_state_seq_get_data(self.ctx, buf, size, seq)
        return bytes(buf[:written])

    def restore(self, data: bytes, seq: int) -> None:
        """Put saved cells back under ``seq`` (into free cells, in their saved order)."""
        buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        if self.L.llama_state_seq_set_data(self.ctx, buf, len(data), seq) == 0:
            raise CacheFull()


def _set(params, field: str, value) -> None:
    """Set a field of a ctypes parameter struct; a name the struct lacks (another
    llama-cpp-python version) is an error, not a silently added Python attribute."""
    if field not in {name for name, *_ in type(params)._fields_}:
        raise LlamaError(f"this llama-cpp-python has no {type(params).__name__}.{field}")
    setattr(params, field, value)


class Aborted(Exception):
    """A pass was stopped by its abort callback; its cells were dropped."""


class CacheFull(Exception):
    """No free cells for a pass (or a restore): the context's K/V cache is full."""
