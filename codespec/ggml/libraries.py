"""The two llama.cpp libraries codespec can run a GGUF on, behind one small interface.

- ``llama.cpp``: mainline, through llama-cpp-python (every CPU, Metal on macOS).
- ``ik_llama.cpp``: a fork whose CPU kernels serve one to eight rows of any weight type from one
  read of the weights (its "IQK" matmuls, Q4_K and Q6_K included) and whose one-row pass is
  faster than mainline's on x86, through the ``ik-llama-cpp-python`` package. The same GGUF file
  runs on it unchanged: only the kernels differ (``docs/benchmarks.md``, "Pass prices by kernel
  library").

Their C APIs differ in names and struct layouts (ik keeps an older ``llama_kv_cache_*`` family
and a ``flags`` argument on sequence state), so ``llama.py`` asks this module's ``Library``
rather than either binding. Both libraries define the same C symbols: a process uses one
(``open_library`` refuses the other once one is loaded).
"""

from __future__ import annotations

import ctypes
import gc
import logging
import os
import sys
from collections.abc import Callable
from typing import Any, Protocol

NAMES = ("llama.cpp", "ik_llama.cpp")
MODULES = {"llama.cpp": "llama_cpp", "ik_llama.cpp": "ik_llama_cpp"}
PACKAGES = {"llama.cpp": "llama-cpp-python", "ik_llama.cpp": "ik-llama-cpp-python"}

# llama.cpp's log lines, by ggml's log levels (1 debug, 2 info, 3 warn, 4 error, 5: the line
# goes on; the same numbers in both libraries). Everything goes to this logger, silent unless
# configured: what failed reaches the user as codespec's one line.
LOG = logging.getLogger("codespec.llama")
LOG.setLevel(logging.CRITICAL + 1)
LOG_LEVELS = {1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING, 4: logging.ERROR}
_last_level = logging.DEBUG


class LibraryError(Exception):
    """A library is not installed, does not load, or another one is loaded already."""


def _log_line(level: int, text: bytes, _user_data) -> None:
    global _last_level
    _last_level = LOG_LEVELS.get(level, _last_level)  # (5 and unknown: as the line before)
    if LOG.isEnabledFor(_last_level):
        LOG.log(_last_level, text.decode("utf-8", "replace").rstrip("\n"))


def _fn(lib: ctypes.CDLL, name: str, argtypes: list, restype: Any) -> Any:
    """A C function of ``lib`` with its signature declared (ctypes needs it for 64-bit values)."""
    func = getattr(lib, name)
    func.argtypes = argtypes
    func.restype = restype
    return func


class Library(Protocol):
    """What ``llama.py`` calls, the same for both libraries. Pointers are plain ints or the
    bindings' own objects; a NULL comes back as a falsy value."""

    name: str
    abort_callback: Callable[[Callable[[Any], bool]], Any]  # wraps a Python function for C
    reports_abort: bool  # whether a pass told to stop returns 2 with its cells dropped

    def load_model(self, path: str, repack: bool, mmap: bool) -> Any: ...
    def free_model(self, model: Any) -> None: ...
    def new_context(self, model: Any, fields: dict[str, Any], flash: bool, kv: str) -> Any: ...
    def free_context(self, ctx: Any) -> None: ...
    def n_vocab(self, model: Any) -> int: ...
    def n_ctx(self, ctx: Any) -> int: ...
    def batch_init(self, rows: int, seq_max: int) -> Any: ...
    def batch_free(self, batch: Any) -> None: ...
    def decode(self, ctx: Any, batch: Any) -> int: ...
    def logits(self, ctx: Any) -> Any: ...
    def set_threads(self, ctx: Any, n: int) -> None: ...
    def set_abort(self, ctx: Any, callback: Any) -> None: ...
    def seq_rm(self, ctx: Any, seq: int, start: int, end: int) -> None: ...
    def seq_cp(self, ctx: Any, source: int, target: int, start: int, end: int) -> None: ...
    def clear(self, ctx: Any) -> None: ...
    def state_size(self, ctx: Any, seq: int) -> int: ...
    def state_get(self, ctx: Any, buf: Any, size: int, seq: int) -> int: ...
    def state_set(self, ctx: Any, buf: Any, size: int, seq: int) -> int: ...


def _set(params, field: str, value) -> None:
    """Set a field of a ctypes parameter struct; a name the struct lacks (another binding
    version) is an error, not a silently added Python attribute."""
    if field not in {name for name, *_ in type(params)._fields_}:
        raise LibraryError(f"this binding has no {type(params).__name__}.{field}")
    setattr(params, field, value)


class Mainline(Library):
    """llama.cpp through llama-cpp-python's ctypes bindings (``llama_memory_*`` API)."""

    name = "llama.cpp"
    reports_abort = True

    def __init__(self, module: Any) -> None:
        self.L = module
        self.abort_callback = module.ggml_abort_callback
        self._log = module.llama_log_callback(_log_line)  # kept: C holds a pointer to it
        module.llama_log_set(self._log, ctypes.c_void_p(0))
        module.llama_backend_init()

    def load_model(self, path: str, repack: bool, mmap: bool) -> Any:
        L = self.L
        params = L.llama_model_default_params()
        _set(params, "use_extra_bufts", repack)
        _set(params, "load_mode", L.LLAMA_LOAD_MODE_MMAP if mmap else L.LLAMA_LOAD_MODE_NONE)
        return L.llama_model_load_from_file(os.fsencode(path), params)

    def free_model(self, model: Any) -> None:
        self.L.llama_model_free(model)

    def new_context(self, model: Any, fields: dict[str, Any], flash: bool, kv: str) -> Any:
        L = self.L
        params = L.llama_context_default_params()
        kv_type = {"f16": L.GGML_TYPE_F16, "q8_0": L.GGML_TYPE_Q8_0}[kv]
        flash_type = L.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash else L.LLAMA_FLASH_ATTN_TYPE_DISABLED
        extra = dict(flash_attn_type=flash_type, kv_unified=True, type_k=kv_type, type_v=kv_type)
        for field, value in (fields | extra | {"no_perf": True}).items():
            _set(params, field, value)
        return L.llama_init_from_model(model, params)

    def free_context(self, ctx: Any) -> None:
        self.L.llama_free(ctx)

    def n_vocab(self, model: Any) -> int:
        return self.L.llama_vocab_n_tokens(self.L.llama_model_get_vocab(model))

    def n_ctx(self, ctx: Any) -> int:
        return self.L.llama_n_ctx(ctx)

    def batch_init(self, rows: int, seq_max: int) -> Any:
        return self.L.llama_batch_init(rows, 0, seq_max)

    def batch_free(self, batch: Any) -> None:
        self.L.llama_batch_free(batch)

    def decode(self, ctx: Any, batch: Any) -> int:
        return self.L.llama_decode(ctx, batch)

    def logits(self, ctx: Any) -> Any:
        return self.L.llama_get_logits(ctx)

    def set_threads(self, ctx: Any, n: int) -> None:
        self.L.llama_set_n_threads(ctx, n, n)

    def set_abort(self, ctx: Any, callback: Any) -> None:
        self.L.llama_set_abort_callback(ctx, callback, None)

    def seq_rm(self, ctx: Any, seq: int, start: int, end: int) -> None:
        self.L.llama_memory_seq_rm(self.L.llama_get_memory(ctx), seq, start, end)

    def seq_cp(self, ctx: Any, source: int, target: int, start: int, end: int) -> None:
        self.L.llama_memory_seq_cp(self.L.llama_get_memory(ctx), source, target, start, end)

    def clear(self, ctx: Any) -> None:
        self.L.llama_memory_clear(self.L.llama_get_memory(ctx), True)

    def state_size(self, ctx: Any, seq: int) -> int:
        return self.L.llama_state_seq_get_size(ctx, seq)

    def state_get(self, ctx: Any, buf: Any, size: int, seq: int) -> int:
        return self.L.llama_state_seq_get_data(ctx, buf, size, seq)

    def state_set(self, ctx: Any, buf: Any, size: int, seq: int) -> int:
        return self.L.llama_state_seq_set_data(ctx, buf, size, seq)


class Ik(Library):
    """ik_llama.cpp through ik-llama-cpp-python: its bindings declare the structs and a few
    functions; the cache and state functions codespec needs are declared here from ik's
    ``llama.h`` (the older ``llama_kv_cache_*`` names, a ``flags`` argument on state)."""

    name = "ik_llama.cpp"
    reports_abort = False  # (``llama.py`` drops the cells of a pass told to stop)

    def __init__(self, module: Any) -> None:
        self.I = module
        lib = module._lib
        ctx_p, i32, size_t = ctypes.c_void_p, ctypes.c_int32, ctypes.c_size_t
        u8_p = ctypes.POINTER(ctypes.c_uint8)
        self.abort_callback = module.ggml_abort_callback
        log_type = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
        self._log = log_type(_log_line)  # kept: C holds a pointer to it
        _fn(lib, "llama_log_set", [log_type, ctypes.c_void_p], None)(self._log, None)
        self._seq_rm = _fn(lib, "llama_kv_cache_seq_rm", [ctx_p, i32, i32, i32], ctypes.c_bool)
        self._seq_cp = _fn(lib, "llama_kv_cache_seq_cp", [ctx_p, i32, i32, i32, i32], None)
        self._clear = _fn(lib, "llama_kv_cache_clear", [ctx_p], None)
        self._state_size = _fn(
            lib, "llama_state_seq_get_size", [ctx_p, i32, ctypes.c_uint32], size_t
        )
        self._state_get = _fn(
            lib, "llama_state_seq_get_data", [ctx_p, u8_p, size_t, i32, ctypes.c_uint32], size_t
        )
        self._state_set = _fn(
            lib, "llama_state_seq_set_data", [ctx_p, u8_p, size_t, i32, ctypes.c_uint32], size_t
        )
        self._threads = _fn(
            lib, "llama_set_n_threads", [ctx_p, ctypes.c_uint32, ctypes.c_uint32], None
        )
        self._abort = _fn(
            lib,
            "llama_set_abort_callback",
            [ctx_p, module.ggml_abort_callback, ctypes.c_void_p],
            None,
        )
        self._logits = _fn(lib, "llama_get_logits", [ctx_p], ctypes.POINTER(ctypes.c_float))
        self._n_ctx = _fn(lib, "llama_n_ctx", [ctx_p], ctypes.c_uint32)
        module.llama_backend_init()

    def load_model(self, path: str, repack: bool, mmap: bool) -> Any:
        # ik's ggml keeps a fixed table of ggml contexts, and a model or context nobody holds
        # any more keeps its entries until the cycle collector frees it (a context holds its
        # abort callback, which holds it): collect first, as loading is rare and slow anyway
        gc.collect()
        params = self.I.llama_model_default_params()
        # ik repacks at load time into its row-interleaved layouts (``-rtr``), which its
        # multi-row kernels read; it then reads the file whatever ``use_mmap`` says, since a
        # repacked tensor is a copy
        _set(params, "repack_tensors", repack)
        _set(params, "use_mmap", mmap)
        return self.I.llama_model_load_from_file(os.fsencode(path), params)

    def free_model(self, model: Any) -> None:
        self.I.llama_free_model(model)

    def new_context(self, model: Any, fields: dict[str, Any], flash: bool, kv: str) -> Any:
        params = self.I.llama_context_default_params()
        kv_type = {"f16": 1, "q8_0": 8}[kv]  # (ggml_type numbers, the same in every ggml)
        extra = dict(flash_attn=flash, type_k=kv_type, type_v=kv_type)
        for field, value in (fields | extra).items():
            _set(params, field, value)
        return self.I.llama_init_from_model(model, params)

    def free_context(self, ctx: Any) -> None:
        self.I.llama_free(ctx)

    def n_vocab(self, model: Any) -> int:
        return self.I.llama_vocab_n_tokens(self.I.llama_model_get_vocab(model))

    def n_ctx(self, ctx: Any) -> int:
        return self._n_ctx(ctx)

    def batch_init(self, rows: int, seq_max: int) -> Any:
        return self.I.llama_batch_init(rows, 0, seq_max)

    def batch_free(self, batch: Any) -> None:
        self.I.llama_batch_free(batch)

    def decode(self, ctx: Any, batch: Any) -> int:
        return self.I.llama_decode(ctx, batch)

    def logits(self, ctx: Any) -> Any:
        return self._logits(ctx)

    def set_threads(self, ctx: Any, n: int) -> None:
        self._threads(ctx, n, n)

    def set_abort(self, ctx: Any, callback: Any) -> None:
        self._abort(ctx, callback, None)

    def seq_rm(self, ctx: Any, seq: int, start: int, end: int) -> None:
        self._seq_rm(ctx, seq, start, end)

    def seq_cp(self, ctx: Any, source: int, target: int, start: int, end: int) -> None:
        self._seq_cp(ctx, source, target, start, end)

    def clear(self, ctx: Any) -> None:
        self._clear(ctx)

    def state_size(self, ctx: Any, seq: int) -> int:
        return self._state_size(ctx, seq, 0)

    def state_get(self, ctx: Any, buf: Any, size: int, seq: int) -> int:
        return self._state_get(ctx, buf, size, seq, 0)

    def state_set(self, ctx: Any, buf: Any, size: int, seq: int) -> int:
        return self._state_set(ctx, buf, size, seq, 0)


_opened: dict[str, Library] = {}


def open_library(name: str = "llama.cpp") -> Library:
    """The library ``name``, loaded once per process; a ``LibraryError`` saying how to install
    it, or that the other library is loaded already (their C symbols collide)."""
    if name in _opened:
        return _opened[name]
    if name not in MODULES:
        raise LibraryError(f"unknown kernel library {name!r} (one of {', '.join(NAMES)})")
    other = loaded()
    if other is not None and other != name:
        raise LibraryError(f"{other} is loaded in this process already; {name} cannot be")
    try:
        if name == "llama.cpp":
            import llama_cpp

            library: Library = Mainline(llama_cpp)
        else:
            from ik_llama_cpp import _ctypes_api

            library = Ik(_ctypes_api)
    except (ImportError, OSError, AttributeError) as exc:  # missing, or its .so did not load
        raise LibraryError(
            f"{PACKAGES[name]} is not installed or does not load ({exc}); scripts/setup.sh "
            "installs it"
        ) from None
    _opened[name] = library
    return library


def loaded() -> str | None:
    """The library this process has loaded (through codespec or by importing its binding)."""
    return next((n for n in NAMES if n in _opened or sys.modules.get(MODULES[n])), None)


def installed(name: str) -> bool:
    """Whether ``name``'s package is there (without loading its library)."""
    from importlib.util import find_spec

    module = MODULES[name]
    if module in sys.modules:  # (None there: blocked, as a missing package)
        return sys.modules[module] is not None
    try:
        return find_spec(module) is not None
    except (ImportError, ValueError):
        return False
