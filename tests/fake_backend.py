"""A target backend with scripted logits (nanochat tests its engine this way): no model runs.

The "model" is a pure function of the context: the next token of a Fibonacci recurrence modulo
``VOCAB`` (the sum of the last two ids), its logit well ahead of the rest. A row's logits then
depend on the ids it sees and nothing else, so any pass width, tree or look-ahead gives the
exact logits plain decoding gives, and what the loop emits can be checked against the script
itself. The cache is the list of ids (a row "attends" to exactly the ids its mask shows it).

It implements the target-backend seam (``engine/backend.py``), the places of
``engine/prefill.py`` and the row cache of ``engine/ahead.py``, so the decode loop, the policy,
cancellation and look-ahead run on it as on a real backend.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from codespec.engine import prefill
from codespec.engine.ahead import TreeLookAhead
from codespec.engine.backend import NO_ROW_LIMIT
from codespec.engine.slots import Slot, SlotPool
from codespec.engine.stop import Cancelled, StopSignal

VOCAB = 16
LAYERS = 2  # where a stop is asked, as between decoder layers


def next_token(context: list[int]) -> int:
    """The script: what the "model" chooses after ``context``."""
    if len(context) < 2:
        return 1
    return (context[-1] + context[-2]) % VOCAB


def logits_after(context: list[int]) -> np.ndarray:
    row = np.zeros(VOCAB, dtype=np.float32)
    row[next_token(context)] = 5.0
    row[(next_token(context) + 1) % VOCAB] = 1.0  # a runner-up, far behind
    return row


def greedy(prompt: list[int], n: int) -> list[int]:
    """Plain greedy decoding of the script, done by hand (what the loop must emit)."""
    out: list[int] = []
    for _ in range(n):
        out.append(next_token(prompt + out))
    return out


class FakeBackend:
    max_pass_rows = NO_ROW_LIMIT

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.prefill_chunk = 8
        self.forward_calls = 0
        self.rows_computed = 0
        self.threads = 1
        self.pool = SlotPool(len, slots=4, budget_bytes=1 << 20)
        self.ahead = TreeLookAhead(self)

    # -- the seam's small parts ---------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        return VOCAB

    def use_width_independent_rows(self) -> None:
        """Rows are pure functions of what they see: nothing to switch."""

    def use_threads(self, n: int) -> None:
        self.threads = n

    # -- passes -------------------------------------------------------------------------------

    def run_pass(
        self,
        tokens: list[int],
        mask: np.ndarray | None,
        positions: list[int] | None,
        all_logits: bool,
        stop: StopSignal | None,
        prefill_rows: int | None = None,
    ) -> np.ndarray:
        """Append ``tokens``; row i sees the cached ids and new tokens its ``mask`` row shows
        (causal without one). A stop is asked before each "layer" and leaves the cache as it
        was."""
        for _ in range(LAYERS):
            if stop is not None and stop.stops_pass(prefill_rows):
                raise Cancelled()
        past = len(self.ids)
        rows = []
        for i in range(len(tokens)):
            if mask is None:
                seen = self.ids + tokens[: i + 1]
            else:
                everything = self.ids + tokens
                seen = [everything[j] for j in range(past + len(tokens)) if mask[i, j]]
            rows.append(logits_after(seen))
        self.ids = self.ids + tokens
        self.forward_calls += 1
        self.rows_computed += len(tokens)
        out = np.stack(rows)
        return out if all_logits else out[-1:]

    def forward(
        self,
        tokens: list[int],
        tree_mask: np.ndarray | None = None,
        depths: list[int] | None = None,
        all_logits: bool = True,
        stop: StopSignal | None = None,
    ) -> np.ndarray:
        self.ahead.end()
        past = len(self.ids)
        mask = None
        if tree_mask is not None:
            mask = np.ones((len(tokens), past + len(tokens)), dtype=np.bool_)
            mask[:, past:] = tree_mask
        return self.run_pass(tokens, mask, None, all_logits, stop)

    def prefill(
        self, ids: list[int], stop: StopSignal | None = None, chunk: int | None = None
    ) -> tuple[np.ndarray, int, int]:
        logits, reuse = prefill.start(self, ids)
        if logits is not None:
            return logits, len(ids), 0
        for begin, end in prefill.chunks(reuse, len(ids), chunk or self.prefill_chunk, stop):
            logits = self.run_pass(ids[begin:end], None, None, False, stop, end - begin)
        assert logits is not None
        return logits[-1], reuse, len(ids) - reuse

    # -- cache edits --------------------------------------------------------------------------

    def keep(self, n: int, extra: list[int]) -> None:
        self.ahead.end()
        self.ids = self.ids[:n] + [self.ids[i] for i in extra]

    def crop(self, n: int) -> None:
        self.ahead.end()
        self.ids = self.ids[:n]

    def reset(self) -> None:
        self.ahead.standing = None
        self.ids = []
        self.pool.clear()

    # -- places -------------------------------------------------------------------------------

    def current_slot(self) -> Slot:
        return Slot(list(self.ids), list(self.ids))

    def switch_to(self, slot: Slot) -> None:
        self.ids = list(slot.ids)

    def continue_on(self, shared: int) -> None:
        self.ids = self.ids[:shared]


if TYPE_CHECKING:  # pyright holds the fake to the three seams it stands in for
    from codespec.engine.ahead import RowCache
    from codespec.engine.backend import TargetBackend

    _as_target: TargetBackend = FakeBackend()
    _as_places: prefill.Places = FakeBackend()
    _as_rows: RowCache = FakeBackend()
