"""Remember, per machine, that the draft model cannot pay, so later starts skip loading it.

Calibration at load times a draft step against a target pass; where the draft's step costs
too much of a pass, it is released at once, and loading it only to drop it would slow every
start on that machine (``docs/benchmarks.md``, "The draft on a CPU"). The verdict is kept beside the
kernel plans, keyed like them by processor, flags, torch version and threads
(``machine.machine_fingerprint``), and by the pair, device and quantization.
``--draft on`` still loads the draft (and records nothing); deleting the file measures again.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from .engine.calibration import draft_cost_note
from .files import FileError, parse_json, read_owned_text, write_atomically
from .machine import machine_fingerprint
from .models import PairManifest, cache_root


def verdict_file(manifest: PairManifest, device: str, mode: str) -> Path | None:
    """Where the verdict of this pair on this device and quantization lives (None: no draft)."""
    if manifest.draft is None:
        return None
    pair = (manifest.target, manifest.draft)
    models = [f"{src.label}|{src.sha256}|{src.path}|{src.repo_id}" for src in pair]
    key = hashlib.sha256("|".join([*models, device, mode]).encode()).hexdigest()[:16]
    return cache_root() / "kernels" / f"draft-{key}.json"


def cached_note(path: Path | None) -> str | None:
    """Why the draft was released on this machine before, if it was (else None)."""
    if path is None:
        return None
    try:
        ratio = parse_json(read_owned_text(path)).get(machine_fingerprint())
    except (OSError, FileError, ValueError, AttributeError):
        return None
    if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not ratio > 0:
        return None  # not a measured ratio (an older file's text, or damaged): measure again
    return draft_cost_note(ratio)


def remember(path: Path | None, ratio: float | None) -> None:
    """Record that the draft cannot pay on this machine: its step costs ``ratio`` of a target
    pass (None: it was not released, nothing to record)."""
    if path is None or ratio is None:
        return
    try:
        saved = parse_json(read_owned_text(path))
        saved = saved if isinstance(saved, dict) else {}
    except (OSError, FileError, ValueError):
        saved = {}
    saved[machine_fingerprint()] = round(ratio, 3)
    write_atomically(path, json.dumps(saved, indent=1))
