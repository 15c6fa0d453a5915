"""Wall-clock timing of engine work (pass prices, draft steps, calibration)."""

from __future__ import annotations

import time


def timed(fn, *args, **kwargs):
    """Run ``fn`` and return (result, elapsed seconds). (A backend hands its logits back as
    host arrays, so GPU work has finished when its call returns.)"""
    t0 = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - t0


def pass_seconds(model, ids: list[int], tokens: list[int], repeats: int = 3) -> float:
    """Median seconds for one pass of ``model`` (a target backend) over ``tokens`` after
    ``ids``, after a first pass that pays set-up costs; the cache is cleared after."""
    return _median_after(model, ids, lambda: model.forward(tokens, all_logits=False), repeats)


def prefill_seconds(model, ids: list[int], new: list[int], repeats: int = 3) -> float:
    """Median seconds for ``model`` to prefill ``new`` after a cached ``ids``, through its
    own ``prefill`` (its chunking, and on ggml its unpadded chunks: a decoding pass of as many
    rows would pad them and ask every row's logits), after a first one that pays set-up."""
    return _median_after(model, ids, lambda: model.prefill(ids + new), repeats)


def _median_after(model, ids: list[int], run, repeats: int) -> float:
    """Median seconds of ``run`` with ``ids`` cached before each call (cropped back to them
    after), not counting the first call; the cache is cleared after."""
    model.prefill(ids)
    times = []
    for _ in range(repeats + 1):
        _, seconds = timed(run)
        model.crop(len(ids))
        times.append(seconds)
    model.reset()
    return sorted(times[1:])[repeats // 2]
