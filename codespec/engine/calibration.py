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

import torch

from ..memory import return_freed_memory
from .backend import TargetBackend
from .policy import SpeculationPolicy
from .timing import pass_seconds, prefill_seconds

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
    return all(torch.equal(rows[0], r) for r in rows[1:])


class Calibrated:
    """What ``calibrate`` measured and what the draft's life decided (part of ``Engine``)."""

    target: TargetBackend
    policy: SpeculationPolicy
    drafter: object | None

    def _init_calibration(self) -> None:
        self.pad_single_row = True  # until calibrate() has checked that one-row passes are exact
        self.prefill_rate: float | None = None  # prompt tokens per second, measured at load
        self.draft_note = ""  # why the draft was released, if it was
        self.draft_step_ratio: float | None = None  # draft step / target pass, when released
        # told the ratio when the draft is released (the daemon remembers it for later starts)
        self.on_draft_released: Callable[[float], None] | None = None

    def calibrate(self, context_len: int = 16) -> None:
        """Measure at load, on a short dummy context (both caches are cleared after):

        * whether one-row passes are exact (then plain decoding needs no padding row, see
          ``loop.Engine._verify``);
        * the prefill speed, which sizes prefill chunks and time-sized prompt windows;
        * the cost of target passes of widths 1, 2, 4 and 8, and of a draft step.
        """
        vocab = self.target.vocab_size
        ids = [(7 * i + 100) % vocab for i in range(context_len)]
        self.pad_single_row = not one_row_is_exact(self.target, ids)
        chunk = [(11 * i + 50) % vocab for i in range(64)]
        self.prefill_rate = len(chunk) / prefill_seconds(self.target, ids, chunk)
        self.target.prefill_chunk = max(16, min(256, int(self.prefill_rate * PREFILL_CHUNK_S)))
        for width in CALIBRATION_WIDTHS:
            rows = 2 if width == 1 and self.pad_single_row else width
            self.policy.costs.observe_pass(width, pass_seconds(self.target, ids, ids[:rows]))
        if self.drafter is not None:
            self.policy.costs.draft_step_s.add(self.drafter.step_seconds(ids))
            if self.policy.draft_mode == "auto" and not self.policy.draft_can_pay():
                self.release_draft()

    def release_draft(self) -> None:
        """Drop the draft model (its memory goes with it): on this machine its step costs too
        much of a target pass for it to pay even at a good acceptance rate."""
        ratio = self.policy.costs.draft_step_s.value / self.policy.costs.price(1)
        self.draft_step_ratio = ratio
        self.draft_note = f"draft released: {draft_cost_note(ratio)}"
        self.drafter = None
        self.policy.turn_draft_off()
        if self.on_draft_released is not None:
            self.on_draft_released(ratio)

    def reconsider_draft(self) -> bool:
        """Release the draft if the costs measured in real requests say it cannot pay (once
        ``DRAFT_RECHECK_PASSES`` passes have been measured). Returns whether it was released
        now."""
        if self.drafter is None or self.policy.draft_mode != "auto":
            return False
        if self.policy.costs.passes < DRAFT_RECHECK_PASSES or self.policy.draft_can_pay():
            return False
        self.release_draft()
        return_freed_memory(collect=True)
        return True
