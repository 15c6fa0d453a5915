"""The speculative decoding engine: token ids in, token ids out (no text, no LSP)."""

from .kvcache import CachedModel, Cancelled
from .loop import Engine, Generation, GenerationParams, GenerationStats, StopRule
from .ngram import NgramProposer
from .policy import SpeculationPolicy
from .tree import Candidate, TokenTree

__all__ = [
    "CachedModel",
    "Cancelled",
    "Candidate",
    "Engine",
    "Generation",
    "GenerationParams",
    "GenerationStats",
    "NgramProposer",
    "SpeculationPolicy",
    "StopRule",
    "TokenTree",
]
