"""The engine's life around requests, part two: work done while nobody waits.

* ``warm``: prefill the prompt of a place a request is likely to come from next, so that the
  request finds it cached;
* ``look_ahead``: compute ahead, as token trees, the prompts of the next keystrokes there, so
  that a request typed one character further starts from their logits (``ahead.py``): its
  first token costs no pass, nor its second.

Both give the engine up as their ``StopSignal`` says (``stop.py``); what they computed before
stays cached. The engine holds one ``WarmUps`` over its target, sharing its lock (one
generation or warm-up at a time owns the caches) and its calibration.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np

from .backend import TargetBackend
from .calibration import PREFILL_CHUNK_S, Calibration
from .slots import common_prefix_len
from .stop import Cancelled, StopSignal
from .tree import Logits

# How many of the likeliest next keystrokes ``look_ahead`` computes in its first pass (the rest
# follow in a second): each row adds to the pass's cost, and the user may type before a wide
# pass ends.
AHEAD_FIRST = 3


class WarmUps:
    """Warm-ups and look-ahead on a target backend, while nobody waits."""

    def __init__(
        self,
        target: TargetBackend,
        lock: threading.Lock,
        stop_ids: set[int],
        calibration: Calibration,
    ) -> None:
        self.target = target
        self.lock = lock
        self.stop_ids = stop_ids
        self.calibration = calibration
        # the last request's prompt and the logits after it (what ``look_ahead`` starts from)
        self.prompt_logits: tuple[list[int], Logits] | None = None
        self.ahead_of: list[int] | None = None  # the prompt the standing look-ahead is for

    def request_ran(self, prompt: list[int], logits: Logits) -> None:
        """A request prefilled ``prompt``: its logits are where a look-ahead there starts,
        and any look-ahead that stood is gone."""
        self.prompt_logits, self.ahead_of = (list(prompt), logits), None

    def warm(self, prompt: list[int], stop: StopSignal, chunk_s: float = PREFILL_CHUNK_S) -> int:
        """Prefill ``prompt`` (all but its last token: a request recomputes that one anyway)
        ahead of a request, in chunks of about ``chunk_s`` seconds, until ``stop`` says stop
        (what was computed stays cached; a preempted chunk is dropped). Returns tokens
        computed."""
        if len(prompt) < 2:
            return 0
        ids = prompt[:-1]
        chunk = max(8, int((self.calibration.prefill_rate or 256 / chunk_s) * chunk_s))
        with self.lock:
            if self.target.ahead.looked_ahead(prompt):
                return 0  # computed ahead, its last id included
            self.target.ahead.end(ids)
            shared = common_prefix_len(self.target.ids, ids)
            if shared == len(ids):
                return 0  # all cached (prefill would recompute the last id for its logits)
            start = min(shared, len(ids) - 1)  # what prefill keeps
            try:
                self.target.prefill(ids, stop, chunk=chunk)
            except Cancelled:
                pass
            return max(0, len(self.target.ids) - start)

    def look_ahead(
        self,
        prompt: list[int],
        next_prompts: Callable[[Logits], list[list[int]]],
        stop: StopSignal,
    ) -> int:
        """While nobody waits: compute ahead the prompts of the next keystrokes at ``prompt``
        (``next_prompts`` picks them from the logits after ``prompt``, likeliest first) as
        token trees (``TargetBackend.look_ahead``), so that a request that comes with one of
        them starts from its logits. Three passes: the ``AHEAD_FIRST`` likeliest prompts, the
        rest, and the target's greedy next token after each. Returns the rows computed.

        Only where a lone row is not padded (``calibrate``): a one-row pass then computes a row
        exactly as a wider one does, so the rows computed ahead are the very rows a prefill
        would compute and a completion is the same whether or not it was looked ahead; or
        exactness is not asked for, and the rows computed ahead are the target's own in the
        pass that computed them. ``stop`` ends it between two decoder layers (a pass stopped
        keeps nothing; the passes before it stay)."""
        if self.calibration.pad_single_row or len(prompt) < 2:
            return 0
        with self.lock:
            if self.ahead_of == prompt and self.target.ahead.looked_ahead(prompt):
                return 0  # done already
            memo = self.prompt_logits
            rows = 0
            try:
                if memo is not None and memo[0] == prompt and self._holds(prompt):
                    logits = memo[1]
                else:
                    logits = self.target.prefill(prompt, stop)[0]
                    self.prompt_logits = (list(prompt), logits)
                prompts = [ids for ids in next_prompts(logits) if ids != prompt]
                known = {tuple(prompt): logits}
                # The likeliest in a first, narrower pass (ready sooner for a quick keystroke),
                # the rest in a second, then the target's choice after each (see ``_verify``).
                first, rest = prompts[:AHEAD_FIRST], prompts[AHEAD_FIRST:]
                rows += self.target.ahead.look_ahead(first, known, stop=stop)
                self.ahead_of = list(prompt)
                if rest:
                    rows += self.target.ahead.look_ahead(rest, known, stop=stop)
                if choices := self._choices_after(prompts):
                    rows += self.target.ahead.look_ahead(choices, known, stop=stop)
            except Cancelled:
                pass
            return rows

    def _choices_after(self, prompts: list[list[int]]) -> list[list[int]]:
        """Each of ``prompts`` computed ahead, followed by the target's greedy choice there."""
        out = []
        for ids in prompts:
            logits = self.target.ahead.ahead_logits(ids)
            if logits is not None and (token := int(np.argmax(logits))) not in self.stop_ids:
                out.append([*ids, token])
        return out

    def _holds(self, prompt: list[int]) -> bool:
        """Whether the target's cache holds ``prompt`` (a plain sequence, no look-ahead)."""
        return not self.target.ahead.looking_ahead and self.target.ids[: len(prompt)] == prompt
