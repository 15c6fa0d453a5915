"""The speculative decoding engine: token ids in, token ids out (no text, no LSP).

Rooms: the decode loop (``loop.py``) over a target backend (``backend.py``; torch's is
``torch_backend/``, llama.cpp's ``ggml/``), proposers (``proposers.py``: ``ngram.py``,
``draft.py``), the policy (``policy.py``), token trees and their acceptance (``tree.py``,
``verify.py``), the stop signal (``stop.py``), and the engine's life around requests
(``calibration.py``, ``warmup.py``).

The engine imports no torch (``tests/test_layers.py`` holds it): the loop's maths is numpy's,
and only the torch backend (``torch_backend/``) needs torch.
"""

from .loop import Engine
from .ngram import NgramProposer
from .policy import SpeculationPolicy
from .request import Generation, GenerationParams, GenerationStats, StopRule
from .stop import Cancelled, StopSignal
from .tree import Candidate, TokenTree

__all__ = [
    "Cancelled",
    "Candidate",
    "Engine",
    "Generation",
    "GenerationParams",
    "GenerationStats",
    "NgramProposer",
    "SpeculationPolicy",
    "StopRule",
    "StopSignal",
    "TokenTree",
]
