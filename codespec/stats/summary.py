"""The report's figures computed with SQLite's help: two scans of the window, whatever its size.

One ``GROUP BY`` query sums every column per (group, outcome, shown, verdict, stop), a few
hundred combinations at most, which are folded into each group's figures and the window's;
one more query reads the latencies of the requests that ran, as plain numbers in compact
arrays, for the percentiles. No row becomes a Python dict, so a report over months of heavy
use stays small and quick (``docs/benchmarks.md``, "Measurements behind the code").

``report.summarize`` defines every figure over a list of rows (the HTML page still draws from
rows); this module computes the same figures and is tested against it on random stores
(``tests/test_stats.py``: the SQL report equals the one built from the rows).
"""

from __future__ import annotations

import math
import sqlite3
from array import array
from collections import Counter, defaultdict

from ..sources import RECORDED_SOURCES
from .record import Outcome, number

LATENCIES = ("queue_ms", "prefill_ms", "first_ms", "total_ms")
# The last moment a day can be named (9999-12-31T23:59:59Z): a later time, or one before
# 1970, has no day in either SQLite or Python (``report.day_of`` says the same).
LAST_DAY_S = 253402300799
# Each group's key as SQL. Whatever a row holds (a time no calendar has, a NULL where a
# hand-made table allows one), the key is text: ``UNKNOWN`` rather than NULL, which would
# sort against the other keys nowhere.
UNKNOWN = "unknown"
_KEYS = {
    "language": "language",
    "kind": "kind || '/' || \"trigger\"",
    "day": f"CASE WHEN {number('t')} BETWEEN 0 AND {LAST_DAY_S} "
    "THEN strftime('%Y-%m-%d', t, 'unixepoch', 'localtime') END",
    "context": "language || ' ' || CASE WHEN context = '' THEN 'in-file' "
    "ELSE replace(context, ',', '+') END",
    "client": f"CASE WHEN client = '' THEN '{UNKNOWN}' ELSE client END",
    # how requests of each kind ended: a stop reason where the model ran (a next edit the
    # guard refused says why: ``nextedit/guard.py``), else the outcome
    "ending": "kind || ': ' || CASE WHEN stop = '' THEN outcome ELSE stop END",
}
GROUP_SQL = {by: f"COALESCE(CAST(({sql}) AS TEXT), '{UNKNOWN}')" for by, sql in _KEYS.items()}
RAN = (Outcome.SERVED, Outcome.EMPTY)  # outcomes whose request ran the model
SUMMED = (  # columns summed per combination
    "tokens",
    "chars",
    "lines",
    "passes",
    "decode_s",
    "accepted_chars",
    "ngram_proposed",
    "ngram_accepted",
    "workspace_proposed",
    "workspace_accepted",
    "draft_proposed",
    "draft_accepted",
    "server_proposed",
    "server_accepted",
    "prefill_tokens",
    "cached_tokens",
)


class Tally:
    """What one group's combinations add up to."""

    def __init__(self) -> None:
        self.requests = 0
        self.outcomes: Counter = Counter()
        self.verdicts: Counter = Counter()  # among suggestions shown
        self.stops: Counter = Counter()  # among requests that ran
        self.ran: Counter = Counter()  # column sums over requests that ran
        self.served: Counter = Counter()  # ... over suggestions (served)
        self.shown: Counter = Counter()  # ... over suggestions shown
        self.suggestions = self.shown_count = 0

    def add(self, outcome: str, shown: int, verdict, stop: str, count: int, sums: dict) -> None:
        self.requests += count
        self.outcomes[outcome] += count
        if outcome in RAN:
            self.ran.update(sums)
            if stop:
                self.stops[stop] += count
        if outcome == Outcome.SERVED:
            self.suggestions += count
            self.served.update(sums)
            if shown:
                self.shown_count += count
                self.shown.update(sums)
                self.verdicts[verdict] += count


def summaries(
    conn: sqlite3.Connection, where: str, args: list, by: str
) -> tuple[dict, dict[str, dict]]:
    """(the whole window's figures, each group's figures by key) for the rows ``where``."""
    group = GROUP_SQL[by]
    table = source(conn, where, args)
    sums = ", ".join(f"SUM({number(name)})" for name in SUMMED)
    tallies: dict[str, Tally] = defaultdict(Tally)
    total = Tally()
    query = (
        f"SELECT {group}, outcome, shown != 0, verdict, stop, COUNT(*), {sums} "
        f"FROM {table}{where} GROUP BY 1, 2, 3, 4, 5"
    )
    for key, outcome, shown, verdict, stop, count, *values in conn.execute(query, args):
        summed = dict(zip(SUMMED, values, strict=True))
        tallies[key].add(outcome, shown, verdict, stop, count, summed)
        total.add(outcome, shown, verdict, stop, count, summed)
    latencies = _latencies(conn, table, where, args, group)
    every = {name: array("d") for name in LATENCIES}
    for per_name in latencies.values():
        for name, values in per_name.items():
            every[name].extend(values)
    groups = {key: _figures(tally, latencies.get(key, {})) for key, tally in tallies.items()}
    return _figures(total, every), groups


def source(conn: sqlite3.Connection, where: str, args: list) -> str:
    """The table to read the window from, with SQLite's choice of index or without it. An index
    on the time (or the language, for grouping) walks the rows in its order and looks each one
    up: quick for a short window, slower than reading the table straight through for one that
    holds much of it (``docs/benchmarks.md``, "Measurements behind the code"). A language
    filter keeps its index."""
    if "language" in where:
        return "requests"
    if "t >= ?" in where:  # (a window in time; every window also leaves out rows without one)
        (in_window,) = conn.execute(f"SELECT COUNT(*) FROM requests{where}", args).fetchone()
        (everything,) = conn.execute("SELECT COUNT(*) FROM requests").fetchone()
        if 4 * in_window < everything:
            return "requests"
    return "requests NOT INDEXED"


def _latencies(
    conn: sqlite3.Connection, table: str, where: str, args: list, group: str
) -> dict[str, dict[str, array]]:
    """Each group's latencies (ms) of the requests that ran, by name, missing ones left out."""
    out: dict[str, dict[str, array]] = defaultdict(lambda: {n: array("d") for n in LATENCIES})
    scope = f"{where} AND " if where else " WHERE "
    marks = ", ".join("?" for _ in RAN)
    read = ", ".join(number(name) for name in LATENCIES)
    query = f"SELECT {group}, {read} FROM {table}{scope}outcome IN ({marks})"
    for key, *values in conn.execute(query, [*args, *RAN]):
        arrays = out[key]
        for name, value in zip(LATENCIES, values, strict=True):
            if value is not None:
                arrays[name].append(value)
    return out


def _figures(tally: Tally, latencies: dict[str, array]) -> dict:
    ran, served, shown = tally.ran, tally.served, tally.shown
    verdicts = tally.verdicts
    return {
        "requests": tally.requests,
        "outcomes": dict(tally.outcomes),
        "suggestions": tally.suggestions,
        "shown": tally.shown_count,
        "accepted": verdicts["accepted"],
        "partial": verdicts["partial"],
        "rejected": verdicts["rejected"],
        "unjudged": verdicts[None],
        "acceptance_rate": ratio(verdicts["accepted"], tally.shown_count),
        "partial_rate": ratio(verdicts["partial"], tally.shown_count),
        "accepted_chars": shown["accepted_chars"],
        "shown_chars": shown["chars"],
        "char_acceptance_rate": ratio(shown["accepted_chars"], shown["chars"]),
        "tokens": ran["tokens"],
        "passes": ran["passes"],
        "tokens_per_pass": ratio(ran["tokens"], ran["passes"]),
        "tokens_per_s": ratio(ran["tokens"], ran["decode_s"]),
        **{
            source: proposer(ran[f"{source}_proposed"], ran[f"{source}_accepted"])
            for source in RECORDED_SOURCES
        },
        "output": {
            "mean_tokens": ratio(served["tokens"], tally.suggestions),
            "mean_chars": ratio(served["chars"], tally.suggestions),
            "mean_lines": ratio(served["lines"], tally.suggestions),
        },
        "stops": dict(tally.stops),
        "latency_ms": {name: percentiles(latencies.get(name, ())) for name in LATENCIES},
        "prompt": {
            "prefilled_tokens": ran["prefill_tokens"],
            "reused_tokens": ran["cached_tokens"],
        },
    }


def percentiles(values) -> dict:
    """Nearest-rank p50 / p95 / p99 (None without samples)."""
    ordered = sorted(values)

    def rank(p: float) -> float | None:
        if not ordered:
            return None
        return ordered[min(len(ordered) - 1, max(0, math.ceil(p * len(ordered)) - 1))]

    return {"n": len(ordered), "p50": rank(0.50), "p95": rank(0.95), "p99": rank(0.99)}


def proposer(proposed: int, accepted: int) -> dict:
    return {"proposed": proposed, "accepted": accepted, "rate": ratio(accepted, proposed)}


def ratio(part: float, whole: float) -> float | None:
    return part / whole if whole else None
