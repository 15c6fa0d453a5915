"""Pass costs: what a target pass of each width and a draft step cost, measured as they run.

``T(w)``, the seconds of a target pass over ``w`` tokens, is measured for each width the loop
runs (and for 1, 2, 4, 8 at load, ``calibration.py``); a width not measured yet is costed on the
straight line between its measured neighbours, because each extra row costs about the same.
Past the widest measured width a pass is guessed a little dearer per doubling, so that wider
chains get tried there and then measured (``docs/benchmarks.md``, "Pass prices", shows the
curves on each kind of machine).

A cost taken in a bad moment (another process had the cores) must not be final: a width bucket
the choice stops using is re-measured after a gap that doubles each time (``WidthProbes``), and
that probe's measurement replaces the old average instead of joining it.

Prices are kept per thread count: on a busy machine the engine runs fewer threads
(``machine.FreeCores``), where every width costs more, and the quiet prices are still right
when the other process ends. A thread count seen for the first time starts from the prices of
the one before and learns its own.
"""

from __future__ import annotations

import copy

WIDTH_BUCKETS = (1, 2, 4, 8, 16, 32, 64)
WIDTH_PROBE_GAP = 64  # passes before a width the choice never uses is measured again
WIDTH_PROBE_MAX_GAP = 1024
GUESS_PER_DOUBLING = 1.05  # past the widest measured width: this much dearer per bucket


def bucket(width: int) -> int:
    """The measured width bucket a pass of ``width`` tokens falls in."""
    return next((b for b in WIDTH_BUCKETS if width <= b), WIDTH_BUCKETS[-1])


class Ema:
    """Exponential moving average that starts at its first sample."""

    def __init__(self, alpha: float = 0.2, value: float | None = None) -> None:
        self.alpha = alpha
        self.value = value

    def add(self, x: float) -> None:
        self.value = x if self.value is None else (1 - self.alpha) * self.value + self.alpha * x


class PassCosts:
    """Seconds a target pass by width, and a draft step; how many passes have been measured."""

    def __init__(self) -> None:
        self.pass_s: dict[int, Ema] = {}  # seconds a target pass, by width
        self.draft_step_s = Ema()
        self.passes = 0
        self.last_measured: dict[int, int] = {}  # width -> pass count when last observed
        self.fresh_bucket: int | None = None  # a probe's bucket: its next pass replaces the mean
        self.threads = 0  # the thread count the prices above are for (0: not told)
        self.other_threads: dict[int, tuple[dict[int, Ema], Ema]] = {}

    def use_threads(self, n: int) -> None:
        """The next passes run on ``n`` threads: price them with what ``n`` threads cost."""
        if n == self.threads:
            return
        if self.threads:
            self.other_threads[self.threads] = (self.pass_s, self.draft_step_s)
            kept = self.other_threads.pop(n, None)
            if kept is None:
                kept = copy.deepcopy((self.pass_s, self.draft_step_s))
            self.pass_s, self.draft_step_s = kept
        self.threads = n

    def observe_pass(self, width: int, seconds: float) -> None:
        if self.fresh_bucket is not None and bucket(width) == self.fresh_bucket:
            self.pass_s[width] = Ema(value=seconds)  # a probe: a fresh measurement, no average
            self.fresh_bucket = None
        else:
            self.pass_s.setdefault(width, Ema()).add(seconds)
        self.last_measured[width] = self.passes
        self.passes += 1

    def measured(self) -> list[tuple[int, float]]:
        """(width, seconds a pass) for every width measured so far, narrowest first."""
        return sorted((w, e.value) for w, e in self.pass_s.items() if e.value is not None)

    def widest_measured(self) -> int:
        measured = self.measured()
        return measured[-1][0] if measured else 1

    def price(self, width: int) -> float:
        """Estimated seconds for a target pass of ``width`` tokens: its own measurement, else the
        straight line between the nearest measured widths either side, else, past the widest
        measured, that one's cost made ``GUESS_PER_DOUBLING`` dearer per doubling of the width
        bucket."""
        if width in self.pass_s and (own := self.pass_s[width].value) is not None:
            return own
        known = self.measured()
        if not known:
            return 1.0
        above = next(((w, t) for w, t in known if w > width), None)
        below = [(w, t) for w, t in known if w < width]
        if above is None:
            w0, t0 = below[-1]
            doublings = max(0, bucket(width).bit_length() - bucket(w0).bit_length())
            return t0 * GUESS_PER_DOUBLING**doublings
        if not below:
            return above[1]
        (w0, t0), (w1, t1) = below[-1], above
        return t0 + (t1 - t0) * (width - w0) / (w1 - w0)


class WidthProbes:
    """When the next width bucket above a chain's is due to be measured again."""

    def __init__(self) -> None:
        self.gap = {b: WIDTH_PROBE_GAP for b in WIDTH_BUCKETS}

    def due(self, costs: PassCosts, chain: int, room: int) -> int | None:
        """The bucket to probe instead of a pass of ``1 + chain`` rows, if one is due: only
        the next wider bucket that fits in ``room`` nodes, once it went unmeasured for its
        gap."""
        for b in WIDTH_BUCKETS:
            if b <= 1 + chain or b - 1 > room:
                continue
            if costs.passes - costs.last_measured.get(b, 0) >= self.gap[b]:
                return b
            return None
        return None

    def started(self, costs: PassCosts, b: int) -> None:
        """A probe of bucket ``b`` runs now: its measurement is fresh, and the next one of that
        bucket waits twice as long."""
        self.gap[b] = min(self.gap[b] * 2, WIDTH_PROBE_MAX_GAP)
        costs.fresh_bucket = b
