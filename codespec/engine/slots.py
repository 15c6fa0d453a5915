"""KV slots: one cache per place recently completed or warmed, within a byte budget.

A prompt that shares only part of what the current cache holds (a jump to another place,
another document) leaves that cache whole, parked, and continues on a copy of the shared part;
a later prompt picks whichever slot shares the longest prefix with it, so returning to a place
costs nothing. Parked slots are kept within a byte budget, least recently used first out: a
float32 cache of a long prompt is large next to the resident weights (``docs/benchmarks.md``,
"Memory").

The pool knows caches only as objects with a size (``size_of``), so its rules are tested
without a model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# A prompt that leaves at most this many cached tokens unshared stays in the current slot (a
# keystroke drops the previous completion's tokens, no more); a larger difference is another
# place, and the current slot is parked.
PARK_MIN_TOKENS = 96
# What all parked slots together may hold (the current one is never dropped).
PARKED_BUDGET_BYTES = 192 << 20


def common_prefix_len(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two id lists."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


@dataclass
class Slot:
    """A cache and the token ids it holds, in order."""

    ids: list[int]
    cache: Any  # what the backend keeps of it: torch's cache object, ggml's saved bytes


@dataclass
class SlotPool:
    """The parked slots, most recently used first (the current slot is its owner's)."""

    size_of: Callable[[Any], int]
    slots: int = 4  # the current one included
    budget_bytes: int = PARKED_BUDGET_BYTES
    parked: list[Slot] = field(default_factory=list)

    def best_for(self, ids: list[int], current: list[int]) -> tuple[int | None, int]:
        """The parked slot sharing a longer prefix with ``ids`` than ``current`` does (None if
        none), and the length of the longest shared prefix."""
        shared, best = common_prefix_len(current, ids), None
        for i, slot in enumerate(self.parked):
            n = common_prefix_len(slot.ids, ids)
            if n > shared:
                best, shared = i, n
        return best, shared

    def take(self, index: int) -> Slot:
        return self.parked.pop(index)

    def leaves_place(self, unshared: int) -> bool:
        """Whether a prompt that leaves ``unshared`` cached tokens of the current slot unshared
        is another place (park the slot) rather than the same one typed further."""
        return unshared > PARK_MIN_TOKENS and self.slots > 1

    def park(self, slot: Slot) -> None:
        """Keep ``slot`` as the most recent; drop the least recent past the count or budget."""
        if not slot.ids:
            return
        self.parked.insert(0, slot)
        del self.parked[self.slots - 1 :]
        while self.parked and sum(self.size_of(s.cache) for s in self.parked) > self.budget_bytes:
            self.parked.pop()

    def clear(self) -> None:
        self.parked = []
