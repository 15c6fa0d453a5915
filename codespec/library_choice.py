"""Which llama.cpp library runs a GGUF target on this CPU: measured once per machine, then read.

``--kernels auto`` (the default) prices a decoding pass of 1, 2 and 4 rows on each installed
library (``ggml/pass_prices.py``, each in a child process: the two cannot share one) the first
time a target file is loaded on a machine, and keeps the figures beside the kernel plans, keyed
by the processor, its kernel flags, the packages and the cores (``machine.machine_fingerprint``)
and by the file. The library whose passes cost least in sum wins: plain decoding runs one-row
passes and speculation mostly two- to four-row ones, so both count. A later start reads the
figures; deleting the file measures again.

Exact rows (``--exact``) stay on mainline llama.cpp, the library whose width-independence
``benchmarks/ggml_invariance.py`` measured (``ggml/backend.rows_are_exact`` checks it at load).
So does a process that has loaded mainline already (reading a GGUF's metadata does), since the
two libraries' C symbols collide.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from .files import read_keyed, write_keyed
from .ggml.libraries import NAMES, PACKAGES, installed, loaded
from .machine import machine_fingerprint
from .models import ModelError, Progress, cache_root

CHOICES = ("auto", *NAMES)
WIDTHS = (1, 2, 4)  # the passes that decide (their sum)
PRICE_TIMEOUT_S = 600  # a child that prices one library (loading the target included)


def verdict_file(key: str) -> Path:
    return cache_root() / "kernels" / f"library-{key[:16]}.json"


def choose_library(asked: str | None, path: Path, key: str, exact: bool, progress: Progress) -> str:
    """The library to load ``path`` on: the one asked for, else (``auto``) the one this
    machine measured cheaper for this file (``key`` names it in the cache)."""
    asked = asked or "auto"
    if asked not in CHOICES:
        raise ModelError(f"--kernels must be one of {', '.join(CHOICES)}, not {asked!r}")
    if asked != "auto":
        if not installed(asked):
            raise ModelError(f"--kernels {asked} needs {PACKAGES[asked]}: run scripts/setup.sh")
        if exact and asked != "llama.cpp":
            raise ModelError("--exact runs on llama.cpp's kernels only (--kernels llama.cpp)")
        return asked
    candidates = [name for name in NAMES if installed(name)]
    if exact or len(candidates) < 2:
        return "llama.cpp" if exact or not candidates else candidates[0]
    already = loaded()
    if already is not None:  # (the other cannot join this process)
        return already
    prices = cached(key) or measure(path, key, candidates, progress)
    return cheapest(prices)


def cheapest(prices: dict) -> str:
    return min(prices, key=lambda name: sum(prices[name][str(w)] for w in WIDTHS))


def cached(key: str) -> dict | None:
    """This machine's pass prices for the file (milliseconds by library and width), or None."""
    prices = read_keyed(verdict_file(key), machine_fingerprint())
    if not isinstance(prices, dict) or not prices:
        return None
    ok = all(
        name in NAMES
        and isinstance(ms, dict)
        and all(isinstance(ms.get(str(w)), int | float) and ms[str(w)] > 0 for w in WIDTHS)
        for name, ms in prices.items()
    )
    return prices if ok else None


def measure(path: Path, key: str, candidates: list[str], progress: Progress) -> dict:
    """Price each candidate library in a child process and remember the figures; a library
    whose child fails is left out (and noted); none priced: mainline."""
    progress(f"timing the kernel libraries ({', '.join(candidates)}) once on this machine")
    prices = {}
    widths = ",".join(map(str, WIDTHS))
    command = [sys.executable, "-m", "codespec.ggml.pass_prices", str(path), "--widths", widths]
    for name in candidates:
        try:
            done = subprocess.run(
                [*command, "--library", name],
                capture_output=True,
                text=True,
                timeout=PRICE_TIMEOUT_S,
            )
            figures = (
                json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else None
            )
        except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
            figures = None
        if not isinstance(figures, dict) or not isinstance(figures.get("ms"), dict):
            progress(f"{name} could not be timed here; it is left out")
            continue
        prices[name] = figures["ms"]
    if not prices:
        return {"llama.cpp": {str(w): 1.0 for w in WIDTHS}}
    write_keyed(verdict_file(key), machine_fingerprint(), prices)
    return prices
