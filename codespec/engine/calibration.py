"""The engine's life around requests, part one: what is measured at load, and the draft's life.

At load the engine measures what the policy and the verifier need to know about this machine
(``calibrate``): whether a one-row pass computes a position bit-identically to the same row
inside a wider pass, the prefill speed, and the price of target passes and of a draft step.

The draft model is kept only while it can pay: judged once at load on those prices, and again on
the running costs after ``DRAFT_RECHECK_PASSES`` passes, because one look at a short context can
misjudge it (``docs/benchmarks.md``, "The draft on a CPU"). A released draft's memory is given
back, and the daemon is told the step's price so that later starts need not load it
(``draft_verdict.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .backend import TargetBackend
from .policy import SpeculationPolicy
from .timing import pass_seconds, prefill_seconds

if TYPE_CHECKING:
    from .draft import DraftProposer

# Seconds of prefill per chunk (by the speed measured at load). Larger chunks prefill faster and
# cost a request little: a cancel for a request at the same place lets the chunk finish (the new
# request needs that work), a request elsewhere preempts it within a layer (``stop.py``). The
# speed by chunk size is in ``docs/benchmarks.md``, "Prefill".
PREFILL_CHUNK_S = 2.0
# Target passes measured (calibration's four included) before the draft's worth is judged
# again on the running costs.
DRAFT_RECHECK_PASSES = 32
CALIBRATION_WIDTHS = (1, 2, 4, 8)


def draft_cost_note(ratio: float) -> str:
    """Why a draft whose step costs ``ratio`` of a target pass is not worth running."""
    return f"a step costs {ratio:.2f} of a target pass here, too much to pay even at 80% acceptance"


def one_row_is_exact(model: TargetBackend, ids: list[int]) -> bool:
    """Whether a one-row pass gives a position exactly the logits it gets as the first row of
    2- and 3-row passes (the kernels then compute every row on its own)."""
    model.prefill(ids)
    rows = []
    for width in (1, 2, 3):
        rows.append(model.forward(ids[:width])[0])
        model.crop(len(ids))
    model.reset()
    return all(np.array_equal(rows[0], r) for r in rows[1:])


@dataclass
class Calibration:
    """What ``measure`` found on this machine at load: the loop, the warm-ups and the policy
    read it."""

    # Whether verification must give a position the bits one-row decoding would (``--exact``):
    # where it need not, a lone token runs in a one-row pass, the fastest kernel there is, and
    # a wider pass may round a near-tie the other way (the bench counts and shows it).
    exact: bool = True
    pad_single_row: bool = True  # until measured: one-row passes may round differently
    prefill_rate: float | None = None  # prompt tokens per second

    def measure(
        self,
        target: TargetBackend,
        policy: SpeculationPolicy,
        drafter: DraftProposer | None,
        context_len: int = 16,
    ) -> None:
        """Measure at load, on a short dummy context (the caches are cleared after):

        * whether one-row passes are exact (then plain decoding needs no padding row, see
          ``loop.Engine._verify``), where exact rows are asked for;
        * the prefill speed, which sizes prefill chunks and time-sized prompt windows;
        * the cost of target passes of widths 1, 2, 4 and 8, and of a draft step (the
          policy's prices).
        """
        vocab = target.vocab_size
        ids = [(7 * i + 100) % vocab for i in range(context_len)]
        self.pad_single_row = self.exact and not one_row_is_exact(target, ids)
        chunk = [(11 * i + 50) % vocab for i in range(64)]
        self.prefill_rate = len(chunk) / prefill_seconds(target, ids, chunk)
        target.prefill_chunk = max(16, min(256, int(self.prefill_rate * PREFILL_CHUNK_S)))
        for width in CALIBRATION_WIDTHS:
            rows = 2 if width == 1 and self.pad_single_row else width
            policy.costs.observe_pass(width, pass_seconds(target, ids, ids[:rows]))
        if drafter is not None:
            policy.costs.draft_step_s.add(drafter.step_seconds(ids))


@dataclass
class DraftLife:
    """Whether the draft model is worth keeping, judged on the engine policy's prices: at load,
    and again once ``DRAFT_RECHECK_PASSES`` real passes have measured them. The engine drops the
    draft when ``cannot_pay`` says so; this records why, and tells whoever listens (the daemon
    remembers the verdict for later starts: ``draft_verdict.py``)."""

    note: str = ""  # why the draft was released or never loaded, if it was
    step_ratio: float | None = None  # draft step / target pass, when released
    on_released: Callable[[float], None] | None = None

    def cannot_pay(self, policy: SpeculationPolicy, running: bool) -> bool:
        """Whether the draft should go: in ``auto`` mode, when its measured step costs too
        much of a target pass for it to pay even at a good acceptance rate (``running``: judge
        only once enough real passes have been measured)."""
        if policy.draft_mode != "auto":
            return False
        if running and policy.costs.passes < DRAFT_RECHECK_PASSES:
            return False
        return not policy.draft_can_pay()

    def released(self, policy: SpeculationPolicy) -> None:
        """The draft was dropped: say why, turn drafting off, tell the listener."""
        step = policy.costs.draft_step_s.value or 0.0  # (measured: it was judged on it)
        ratio = step / policy.costs.price(1)
        self.step_ratio = ratio
        self.note = f"draft released: {draft_cost_note(ratio)}"
        policy.turn_draft_off()
        if self.on_released is not None:
            self.on_released(ratio)
