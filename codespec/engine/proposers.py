"""The proposer seam: what the decode loop asks of a source of candidate tokens.

A proposer guesses how the context goes on; the target verifies its guesses in one pass, so a
wrong guess costs width, never correctness. Each proposer says what its proposal cost (model
steps, in seconds), so the policy can price it against the tokens it brings. Prompt lookup
(``ngram.py``), workspace lookup (``corpus.py``) and the draft model (``draft.py``) implement
it. The engine holds a list of them and loops over it: a *lookup* proposer offers spans found
in text (free: no model runs), a *draft* proposer runs a model and continues the leading span.
Learn-from-results is ``observe``: the loop reports how far the target followed a proposal's
best candidate.

The names of the sources are declared here once: tree nodes, stats and acceptance books are
keyed by them.

Modelled on transformers' candidate generators (``get_candidates`` /
``update_candidate_strategy``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol

import numpy as np

from ..sources import DRAFT, LOOKUP_SOURCES, NGRAM, REWRITE, SOURCES, WORKSPACE
from .tree import Candidate

if TYPE_CHECKING:
    from .request import GenerationParams

# the proposal sources' names (``sources.py``: the stats count them too)
__all__ = ["DRAFT", "LOOKUP_SOURCES", "NGRAM", "REWRITE", "SOURCES", "WORKSPACE"]


class Kind(StrEnum):
    LOOKUP = "lookup"  # spans looked up in text: free, offered whole, several branches
    DRAFT = "draft"  # a model's chain, grown below the leading span when the policy says so


@dataclass
class Sampling:
    """How the request samples: a proposer that samples its guesses (the draft at temperature
    > 0) returns its own distribution with them, for the acceptance rule (``verify.py``)."""

    temperature: float = 0.0
    rng: np.random.Generator | None = None


@dataclass
class Proposals:
    """Candidates, best first, and what producing them cost."""

    candidates: list[Candidate] = field(default_factory=list)
    step_s: list[float] = field(default_factory=list)  # seconds of each model step taken
    forwards: int = 0  # model passes run (a catch-up prefill included)


class Proposer(Protocol):
    name: str  # the source its tree nodes carry (one of ``SOURCES``)
    kind: Kind

    def begin(self, params: GenerationParams) -> bool:
        """A request starts: take what it offers to propose from; return whether this proposer
        proposes at all in it."""
        ...

    def context(
        self, prompt: list[int], generated: list[int], params: GenerationParams
    ) -> list[int]:
        """What this proposer continues: the token ids it reads, ending where the next token
        goes."""
        ...

    def propose(self, context: list[int], budget: int, sampling: Sampling) -> Proposals:
        """Up to ``budget`` tokens in all that continue ``context``."""
        ...

    def lag(self, context: list[int]) -> int:
        """Tokens of ``context`` a proposal would first have to catch up on (0: none)."""
        ...

    def observe(self, proposed: int, accepted: int) -> None:
        """The target kept the first ``accepted`` of ``proposed`` tokens of the best candidate."""
        ...
