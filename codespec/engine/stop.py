"""The one stop signal: when a running request or warm-up gives the engine up.

Work on the engine is stopped for one of two reasons, and the difference decides where it
stops:

* **cancelled**: nobody wants this work's answer any more (a newer request for the document
  came, the client went away). A decoding pass stops between two decoder layers (its tokens
  would be thrown away); a prefill stops at the end of its chunk, because what it computed stays
  cached and a request at the same place needs exactly that work.
* **preempted**: the engine is wanted for work that does not need this (a request at another
  place). Any pass stops between two layers and its rows are dropped; the request waits for one
  layer's share of a chunk at most.

A prefill chunk of at most ``REDO_ROWS`` rows (a keystroke's) stops between layers when merely
cancelled too: the request that cancelled it, typed one character further, computes those rows
in its own pass for a fraction of a pass each, less than waiting out the rest of this one, and
the last of them is often tokenized differently there anyway.

The engine asks at two kinds of points: ``at_chunk_end()`` between prefill chunks and decode
passes, ``stops_pass(...)`` before each decoder layer. Both raise nothing; the caller raises
``Cancelled`` and leaves the cache as it was before the interrupted pass.
"""

from __future__ import annotations

import threading

# A prefill chunk of at most this many rows stops between layers when cancelled (see above).
REDO_ROWS = 4


class Cancelled(Exception):
    """Raised inside the engine when its ``StopSignal`` says stop."""


class StopSignal:
    """Set from any thread, asked by the engine between chunks, passes and layers."""

    def __init__(self) -> None:
        self._cancelled = threading.Event()
        self._preempted = threading.Event()

    def cancel(self, keep_chunk: bool = False) -> None:
        """Nobody wants the work. ``keep_chunk``: whoever stopped it is at the same place and
        needs the running prefill chunk, so that chunk may finish (a later ``cancel()`` without
        it still preempts)."""
        self._cancelled.set()
        if not keep_chunk:
            self._preempted.set()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    @property
    def preempted(self) -> bool:
        return self._preempted.is_set()

    def at_chunk_end(self) -> bool:
        """Asked between prefill chunks and before each decoding pass."""
        return self.cancelled

    def stops_pass(self, prefill_rows: int | None = None) -> bool:
        """Asked before each decoder layer of a pass: a decoding or look-ahead pass
        (``prefill_rows`` None) stops once cancelled, a prefill chunk of ``prefill_rows`` rows
        once preempted, or cancelled when it is a keystroke's few rows."""
        if prefill_rows is None:
            return self.cancelled
        return self.preempted or (prefill_rows <= REDO_ROWS and self.cancelled)
