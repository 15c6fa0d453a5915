"""The proposer seam: what the decode loop asks of a source of candidate tokens.

A proposer guesses how the context goes on; the target verifies its guesses in one pass, so a
wrong guess costs width, never correctness. Each proposer says what its proposal cost (model
steps, in seconds), so the policy can price it against the tokens it brings. n-gram lookup
(``ngram.py``) and the draft model (``draft.py``) implement it; a proposer over the workspace
would too. Learn-from-results is ``observe``: the loop reports how far the target followed a
proposal's best candidate.

Modelled on transformers' candidate generators (``get_candidates`` /
``update_candidate_strategy``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import torch

from .tree import Candidate


@dataclass
class Sampling:
    """How the request samples: a proposer that samples its guesses (the draft at temperature
    > 0) returns its own distribution with them, for the acceptance rule (``verify.py``)."""

    temperature: float = 0.0
    rng: torch.Generator | None = None


@dataclass
class Proposals:
    """Candidates, best first, and what producing them cost."""

    candidates: list[Candidate] = field(default_factory=list)
    step_s: list[float] = field(default_factory=list)  # seconds of each model step taken
    forwards: int = 0  # model passes run (a catch-up prefill included)


class Proposer(Protocol):
    name: str

    def propose(self, context: list[int], budget: int, sampling: Sampling) -> Proposals:
        """Up to ``budget`` tokens in all that continue ``context``."""
        ...

    def lag(self, context: list[int]) -> int:
        """Tokens of ``context`` a proposal would first have to catch up on (0: none)."""
        ...

    def observe(self, proposed: int, accepted: int) -> None:
        """The target kept the first ``accepted`` of ``proposed`` tokens of the best candidate."""
        ...
