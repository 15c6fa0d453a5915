"""Draft-model proposer: a small model of the same family guesses the next few tokens.

The draft keeps its own KV cache, synced to the context by longest common prefix (so rejected
guesses are simply cropped away on the next call). It drafts one token per forward pass and
stops when its confidence in the token it just drafted falls below ``threshold`` (llama.cpp's
``p_min``, transformers' ``assistant_confidence_threshold``) or at ``max_len``.

At temperature 0 it drafts greedily and the tokens count as deterministic proposals; at
temperature > 0 it samples from its own tempered distribution ``q`` and returns ``q`` so the
verifier can apply the rejection rule.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import numpy as np

from .proposers import DRAFT, Kind, Proposals, Sampling
from .slots import common_prefix_len
from .stop import StopSignal
from .timing import pass_seconds, timed
from .tree import Candidate, Logits
from .verify import logits_to_probs, sample

if TYPE_CHECKING:
    from .request import GenerationParams

# A catch-up prefill of at most this many tokens (those accepted since the last call) counts as
# a draft step in the step costs; a longer one is a cold prefill, which the price of a step
# must not include.
CATCH_UP_STEP = 16


class DraftModel(Protocol):
    """What a draft needs of its model: a cache of one sequence, extended a token at a time.
    Every target backend is one; so is a draft with a trimmed vocabulary
    (``ggml/trimmed_vocab.py``). Ids and logits are in the target's vocabulary."""

    @property
    def ids(self) -> list[int]: ...

    @property
    def vocab_size(self) -> int: ...

    @property
    def threads(self) -> int: ...

    def use_threads(self, n: int) -> None: ...

    def prefill(
        self, ids: list[int], stop: StopSignal | None = None, chunk: int | None = None
    ) -> tuple[Logits, int, int]: ...

    def forward(self, tokens: list[int], *, all_logits: bool = True) -> Logits: ...

    def crop(self, n: int) -> None: ...

    def reset(self) -> None: ...


class DraftProposer:
    """Small-model proposer (``proposers.Proposer``)."""

    name = DRAFT
    kind = Kind.DRAFT

    def __init__(self, model: DraftModel, threshold: float = 0.6, max_len: int = 8) -> None:
        self.model = model
        self.threshold = threshold
        self.max_len = max_len

    def begin(self, params: GenerationParams) -> bool:
        return params.use_draft

    def context(
        self, prompt: list[int], generated: list[int], params: GenerationParams
    ) -> list[int]:
        return prompt + generated

    def propose(self, context: list[int], budget: int, sampling: Sampling) -> Proposals:
        """Draft up to ``min(budget, max_len)`` tokens that continue ``context``."""
        limit = min(budget, self.max_len)
        out = Proposals()
        if limit <= 0:
            return out
        (logits, _, computed), seconds = timed(self.model.prefill, context)
        out.forwards += 1
        if computed <= CATCH_UP_STEP:
            out.step_s.append(seconds)
        temperature = sampling.temperature
        tokens: list[int] = []
        qs: list[Logits] = []
        while True:
            probs = logits_to_probs(logits, temperature if temperature > 0 else 1.0)
            if temperature > 0:
                token = sample(probs, sampling.rng)
                qs.append(probs)
            else:
                token = int(np.argmax(probs))
            tokens.append(token)
            if len(tokens) >= limit or float(probs[token]) < self.threshold:
                break
            step, seconds = timed(self.model.forward, [token], all_logits=False)
            out.forwards += 1
            out.step_s.append(seconds)
            logits = step[-1]
        out.candidates.append(Candidate(tokens, self.name, np.stack(qs) if qs else None))
        return out

    def lag(self, context: list[int]) -> int:
        """Context tokens the draft's cache lacks (its next proposal prefills them first)."""
        return len(context) - common_prefix_len(self.model.ids, context)

    def observe(self, proposed: int, accepted: int) -> None:
        """Nothing to adapt here: the policy decides whether and how far to draft."""

    def step_seconds(self, context: list[int]) -> float:
        """What one draft step costs after ``context`` (measured at load)."""
        return pass_seconds(self.model, context, context[:1])
