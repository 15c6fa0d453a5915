"""llama.cpp's CPU kernels as a target backend (``backend.py``) through llama-cpp-python's
low-level API (``llama.py``): codespec keeps its proposers, trees, policy and stop rules."""

from __future__ import annotations


def available() -> bool:
    """Whether llama-cpp-python is installed and its library loads."""
    try:
        from .llama import import_llama

        import_llama()
    except Exception:
        return False
    return True
