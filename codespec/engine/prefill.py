"""What every target backend's prefill shares: which slot to continue in, what to reuse, and
the chunks to compute the rest in.

A prompt first ends a standing look-ahead (if it is one of the prompts computed ahead, its
logits are the answer and nothing is computed). Then the place it belongs to is chosen among the
slots (``slots.py``): the one sharing the longest prefix with it becomes current, and a current
slot that the prompt leaves much of unshared is parked whole while the prompt continues on its
shared part. At least the prompt's last id is always recomputed, since its logits are what the
caller needs. The rest goes in chunks; ``stop`` is asked between them (what was computed stays
cached) and, by the backend, inside a chunk.

A backend supplies only its own steps (``Places``): what its current slot is as something to
park, how to make a parked one current, and how to continue on a shared prefix.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from .ahead import LookAhead
from .slots import Slot, SlotPool, common_prefix_len
from .stop import Cancelled, StopSignal
from .tree import Logits


class Places(Protocol):
    ids: list[int]  # what the current slot holds
    pool: SlotPool  # the parked slots

    @property
    def ahead(self) -> LookAhead[Any]: ...

    def crop(self, n: int) -> None: ...

    def current_slot(self) -> Slot:
        """The current place, as the pool keeps it (its ids and its cache, or bytes of it)."""
        ...

    def switch_to(self, slot: Slot) -> None:
        """Make a parked slot current (the current one was parked first)."""
        ...

    def continue_on(self, shared: int) -> None:
        """Go on with the first ``shared`` positions of the current slot, which was parked
        whole first (the parked copy must not change)."""
        ...


def start(places: Places, ids: list[int]) -> tuple[Logits | None, int]:
    """Begin a prefill of ``ids``: (its logits if it was computed ahead, else None; the
    positions the cache keeps, at most all but the last id). The cache then holds those."""
    if not ids:
        raise ValueError("cannot prefill an empty prompt")
    ahead = places.ahead.end(ids)
    if ahead is not None:  # computed ahead: the cache holds ``ids`` and this is its answer
        return ahead, len(ids)
    select_slot(places, ids)
    reuse = min(common_prefix_len(places.ids, ids), len(ids) - 1)
    places.crop(reuse)
    return None, reuse


def select_slot(places: Places, ids: list[int]) -> None:
    """Make current the slot sharing the longest prefix with ``ids``; park it instead and
    continue on its shared part when ``ids`` leaves much of it unshared (another place)."""
    pool = places.pool
    best, shared = pool.best_for(ids, places.ids)
    if best is not None:
        taken = pool.take(best)
        pool.park(places.current_slot())
        places.switch_to(taken)
    if pool.leaves_place(len(places.ids) - shared):
        pool.park(places.current_slot())
        places.continue_on(shared)


def chunks(begin: int, end: int, step: int, stop: StopSignal | None) -> Iterator[tuple[int, int]]:
    """``[begin, end)`` in chunks of ``step``; ``stop`` is asked before each one."""
    for at in range(begin, end, max(1, step)):
        if stop is not None and stop.at_chunk_end():
            raise Cancelled()
        yield at, min(at + step, end)
