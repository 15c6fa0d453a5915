"""The row one completion request leaves in the store, built from what the worker saw.

Only numbers and labels: the suggestion's length in tokens, characters and lines, never its
text; the document's language, never its name or contents.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from ..sources import RECORDED_SOURCES, SERVER


class Outcome(StrEnum):
    """How a request ended: the stats' ``outcome`` column, and what the worker counts."""

    SERVED = "served"  # answered with a suggestion
    EMPTY = "empty"  # the model ran (or had nothing to do here) and produced no text
    CANCELLED = "cancelled"  # the client cancelled it ($/cancelRequest) or its session ended
    SUPERSEDED = "superseded"  # a newer request for the same document replaced it
    STALE = "stale"  # the document changed before it ran
    FAILED = "failed"  # the model call raised
    DROPPED = "dropped"  # the queue was full
    EXPIRED = "expired"  # it waited past the queue deadline

    @property
    def ran(self) -> bool:
        """Whether the model ran and the request was answered (with text or without)."""
        return self in (Outcome.SERVED, Outcome.EMPTY)


# column -> SQL type; the order is the table's column order
REQUEST_COLUMNS: dict[str, str] = {
    "id": "TEXT PRIMARY KEY",
    "t": "REAL NOT NULL",  # unix time the request arrived
    "language": "TEXT NOT NULL",
    "kind": "TEXT NOT NULL",  # single | multi | none (no completion wanted at that place)
    "trigger": "TEXT NOT NULL",  # auto | invoked
    "outcome": "TEXT NOT NULL",
    "stop": "TEXT NOT NULL DEFAULT ''",  # eos | max_tokens | stop_rule | cancelled
    "tokens": "INTEGER NOT NULL DEFAULT 0",
    "chars": "INTEGER NOT NULL DEFAULT 0",
    "lines": "INTEGER NOT NULL DEFAULT 0",
    "passes": "INTEGER NOT NULL DEFAULT 0",  # target passes, the first token's prefill included
    "ngram_proposed": "INTEGER NOT NULL DEFAULT 0",
    "ngram_accepted": "INTEGER NOT NULL DEFAULT 0",
    "draft_proposed": "INTEGER NOT NULL DEFAULT 0",
    "draft_accepted": "INTEGER NOT NULL DEFAULT 0",
    "prefill_tokens": "INTEGER NOT NULL DEFAULT 0",  # prompt tokens computed
    "cached_tokens": "INTEGER NOT NULL DEFAULT 0",  # prompt tokens reused from the KV cache
    "decode_s": "REAL NOT NULL DEFAULT 0",  # time spent generating, for tokens/s
    "queue_ms": "REAL",
    "prefill_ms": "REAL",
    "first_ms": "REAL",  # request arrived -> first streamed text
    "total_ms": "REAL",  # request arrived -> answer
    # the user's verdict (see verdicts.py); a suggestion is counted once, in this row
    "shown": "INTEGER NOT NULL DEFAULT 0",
    "verdict": "TEXT",  # accepted | partial | rejected | NULL (not judged yet)
    "accepted_chars": "INTEGER NOT NULL DEFAULT 0",
    "verdict_source": "TEXT",  # explicit (an event from the client) | inferred (from edits)
    # added in schema 2: where it decoded, and a remote server's own speculation (remote/)
    "engine": "TEXT NOT NULL DEFAULT 'local'",  # local | remote
    "server_proposed": "INTEGER NOT NULL DEFAULT 0",  # draft tokens the server verified
    "server_accepted": "INTEGER NOT NULL DEFAULT 0",
    # added in schema 3: the context sources the prompt held beyond the file ("workspace")
    "context": "TEXT NOT NULL DEFAULT ''",
    # added in schema 4: the workspace drafter's tokens (``engine/corpus.py``)
    "workspace_proposed": "INTEGER NOT NULL DEFAULT 0",
    "workspace_accepted": "INTEGER NOT NULL DEFAULT 0",
    # added in schema 5: which client asked (an LSP client's name, an HTTP client's)
    "client": "TEXT NOT NULL DEFAULT ''",
}
ADDED_IN_2 = ("engine", "server_proposed", "server_accepted")
ADDED_IN_3 = ("context",)
ADDED_IN_4 = ("workspace_proposed", "workspace_accepted")
ADDED_IN_5 = ("client",)
VERDICT_COLUMNS = ("shown", "verdict", "accepted_chars", "verdict_source")
MAX_LABEL = 64  # a languageId is a label, not a place to store text


def number(column: str) -> str:
    """SQL reading ``column`` as a number, NULL where a row holds anything else: a store is a
    file anyone with the user's rights can write, and one row of text in a number's column
    must not break every report (SQLite keeps whatever type a row was given)."""
    return f"(CASE WHEN typeof({column}) IN ('integer', 'real') THEN {column} END)"


def read(column: str) -> str:
    """SQL reading ``column`` as a report reads it: a number column through ``number``, its
    default where it has one (a count is 0, a latency missing)."""
    kind = REQUEST_COLUMNS[column]
    if not kind.startswith(("REAL", "INTEGER")):
        return column
    return f"COALESCE({number(column)}, 0)" if "DEFAULT 0" in kind else number(column)


def _default(kind: str) -> object:
    """A column's value before anything is known: its SQL default, else NULL."""
    if "DEFAULT ''" in kind:
        return ""
    if "DEFAULT 'local'" in kind:
        return "local"
    if "DEFAULT 0" in kind:
        return 0.0 if kind.startswith("REAL") else 0
    return None


def client_label(name: object) -> str:
    """A client's name as the stats keep it: letters, digits, spaces and ``._-/`` only (it
    comes from the client: an LSP clientInfo, an HTTP User-Agent), at most ``MAX_LABEL``."""
    if not isinstance(name, str):
        return ""
    allowed = (c for c in name[: 4 * MAX_LABEL] if c.isascii() and (c.isalnum() or c in " ._-/"))
    kept = "".join(allowed)
    return " ".join(kept.split())[:MAX_LABEL]


def new_id() -> str:
    """A suggestion id: unguessable, so one session cannot judge another's suggestions."""
    return secrets.token_hex(8)


@dataclass
class Timing:
    """Clock readings (``time.perf_counter``) of one request, filled in as it runs."""

    arrived: float = field(default_factory=time.perf_counter)
    started: float | None = None
    first_text: float | None = None
    done: float | None = None

    def ms(self, start: float | None, end: float | None) -> float | None:
        return None if start is None or end is None else 1000 * (end - start)


class RequestStats(Protocol):
    """What a row reads of a request's counters (the engine's ``GenerationStats``)."""

    stop_reason: str
    tokens: int
    target_passes: int
    proposed: dict[str, int]  # by source: ngram, workspace, draft; a remote server's "server"
    accepted: dict[str, int]
    prefill_tokens: int
    cached_tokens: int
    total_s: float
    prefill_s: float


def request_row(
    request_id: str,
    language: str,
    kind: str,
    trigger: str,
    outcome: str,
    timing: Timing,
    text: str = "",
    stats: RequestStats | None = None,
    wall_time: float | None = None,
    context: tuple[str, ...] = (),
    client: str = "",
) -> dict:
    """The store's row for one request; ``stats`` is the engine's ``GenerationStats`` when the
    model ran."""
    row: dict = {name: _default(kind) for name, kind in REQUEST_COLUMNS.items()}
    row |= {
        "id": request_id,
        "t": wall_time if wall_time is not None else time.time(),
        "language": (language or "unknown")[:MAX_LABEL],
        "kind": kind,
        "trigger": trigger,
        "outcome": outcome,
        "context": ",".join(context),
        "client": client_label(client),
        "chars": len(text),
        "lines": text.count("\n") + 1 if text else 0,
        "queue_ms": timing.ms(timing.arrived, timing.started),
        "first_ms": timing.ms(timing.arrived, timing.first_text),
        "total_ms": timing.ms(timing.arrived, timing.done),
    }
    if stats is not None:
        for source in RECORDED_SOURCES:
            row[f"{source}_proposed"] = stats.proposed.get(source, 0)
            row[f"{source}_accepted"] = stats.accepted.get(source, 0)
        row.update(
            stop=stats.stop_reason,
            tokens=stats.tokens,
            passes=stats.target_passes + 1 if stats.tokens else stats.target_passes,
            engine="remote" if SERVER in stats.proposed else "local",
            prefill_tokens=stats.prefill_tokens,
            cached_tokens=stats.cached_tokens,
            decode_s=max(stats.total_s - stats.prefill_s, 0.0),
            prefill_ms=1000 * stats.prefill_s,
        )
    return row
