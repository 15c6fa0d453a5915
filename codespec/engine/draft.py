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

import threading

import torch

from .kvcache import CachedModel, timed
from .tree import Candidate
from .verify import logits_to_probs, sample


class DraftProposer:
    """Small-model proposer (``propose`` / ``update``)."""

    name = "draft"

    def __init__(self, model: CachedModel, threshold: float = 0.6, max_len: int = 8) -> None:
        self.model = model
        self.threshold = threshold
        self.max_len = max_len
        self.last_step_s: list[float] = []  # seconds per draft forward in the last propose
        self.last_forwards = 0

    def propose(
        self,
        context: list[int],
        budget: int,
        temperature: float = 0.0,
        generator: torch.Generator | None = None,
        cancel: threading.Event | None = None,
    ) -> list[Candidate]:
        """Draft up to ``min(budget, max_len)`` tokens that continue ``context``."""
        limit = min(budget, self.max_len)
        self.last_step_s, self.last_forwards = [], 0
        if limit <= 0:
            return []
        (logits, _, computed), seconds = timed(self.model.prefill, context, cancel)
        self.last_forwards += 1
        if computed <= 16:  # a catch-up on recent tokens is a draft step; a cold prefill is not
            self.last_step_s.append(seconds)
        tokens: list[int] = []
        qs: list[torch.Tensor] = []
        while True:
            probs = logits_to_probs(logits, temperature if temperature > 0 else 1.0)
            if temperature > 0:
                token = sample(probs, generator)
                qs.append(probs)
            else:
                token = int(torch.argmax(probs).item())
            tokens.append(token)
            if len(tokens) >= limit or probs[token].item() < self.threshold:
                break
            out, seconds = timed(self.model.forward, [token], all_logits=False)
            self.last_forwards += 1
            self.last_step_s.append(seconds)
            logits = out[-1]
        q = torch.stack(qs) if qs else None
        return [Candidate(tokens, self.name, q)]

    def update(self, proposed: int, accepted: int) -> None:
        """Nothing to adapt here: the policy decides whether and how far to draft."""
