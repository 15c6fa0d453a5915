"""llama.cpp's CPU kernels as a target backend (``backend.py``) through the low-level API of
llama-cpp-python or ik-llama-cpp-python (``llama.py``, ``libraries.py``): codespec keeps its
proposers, trees, policy and stop rules."""

from __future__ import annotations


def available() -> bool:
    """Whether a llama.cpp library is installed (checked without loading it: a process loads
    one library, the one ``codespec/library_choice.py`` picks)."""
    from .libraries import NAMES, installed

    return any(installed(name) for name in NAMES)
