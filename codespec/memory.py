"""Hand memory the process has freed back to the system, and keep the resident model out of
the garbage collector's way.

glibc keeps freed heap pages for reuse, and the resident size of a long-lived daemon grows with
every large prompt's temporaries (KV caches of places it left, prefill activations) until
something trims the heap. ``malloc_trim`` returns the free pages; it takes ~15-25 ms on the
resident pair's heap, so it runs after loading and once the worker has been idle for a second
(``worker.TRIM_AFTER_IDLE_S``: not between two keystrokes' requests).
"""

from __future__ import annotations

import ctypes
import functools
import gc


@functools.cache
def _libc():
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc (macOS, musl): nothing to trim
        return None


def return_freed_memory(collect: bool = False) -> None:
    """Trim the heap; ``collect`` first frees unreachable reference cycles (after loading)."""
    if collect:
        gc.collect()
    libc = _libc()
    if libc is not None and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)


def freeze_resident_objects() -> None:
    """Move every object alive now (a loaded pair: its modules, tokenizer, config) out of the
    cyclic garbage collector's generations. Python's occasional full collection walks every
    tracked object, and a loaded pair leaves hundreds of thousands: the walk holds the
    interpreter lock long enough for a keystroke's request to wait for it (``docs/benchmarks.md``,
    "Measurements behind the code"). Frozen objects are still freed by reference counting; only
    cycles among them would stay (call after loading, once)."""
    gc.collect()
    gc.freeze()
