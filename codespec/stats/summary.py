"""The report's figures computed inside SQLite: sums and counts with ``GROUP BY``, percentiles
with window functions, so a report over months of heavy use reads no row into Python.

``report.summarize`` defines every figure over a list of rows (the HTML page still draws from
rows); this module computes the same figures and is tested against it on random stores
(``tests/test_stats.py``: the SQL report equals the one built from the rows).
"""

from __future__ import annotations

import sqlite3
from collections import defaultdict

LATENCIES = ("queue_ms", "prefill_ms", "first_ms", "total_ms")
GROUP_SQL = {
    "language": "language",
    "kind": "kind || '/' || \"trigger\"",
    "day": "strftime('%Y-%m-%d', t, 'unixepoch', 'localtime')",
}
RAN = "outcome IN ('served', 'empty')"
SERVED = "outcome = 'served'"
SHOWN = f"({SERVED} AND shown != 0)"
SUMS = {  # figure -> SQL over the rows of a group
    "requests": "COUNT(*)",
    "suggestions": f"SUM({SERVED})",
    "shown": f"SUM({SHOWN})",
    "accepted_chars": f"SUM(CASE WHEN {SHOWN} THEN accepted_chars ELSE 0 END)",
    "shown_chars": f"SUM(CASE WHEN {SHOWN} THEN chars ELSE 0 END)",
    "tokens": f"SUM(CASE WHEN {RAN} THEN tokens ELSE 0 END)",
    "passes": f"SUM(CASE WHEN {RAN} THEN passes ELSE 0 END)",
    "decode_s": f"SUM(CASE WHEN {RAN} THEN decode_s ELSE 0 END)",
    "ngram_proposed": f"SUM(CASE WHEN {RAN} THEN ngram_proposed ELSE 0 END)",
    "ngram_accepted": f"SUM(CASE WHEN {RAN} THEN ngram_accepted ELSE 0 END)",
    "draft_proposed": f"SUM(CASE WHEN {RAN} THEN draft_proposed ELSE 0 END)",
    "draft_accepted": f"SUM(CASE WHEN {RAN} THEN draft_accepted ELSE 0 END)",
    "served_tokens": f"SUM(CASE WHEN {SERVED} THEN tokens ELSE 0 END)",
    "served_chars": f"SUM(CASE WHEN {SERVED} THEN chars ELSE 0 END)",
    "served_lines": f"SUM(CASE WHEN {SERVED} THEN lines ELSE 0 END)",
    "prefilled_tokens": f"SUM(CASE WHEN {RAN} THEN prefill_tokens ELSE 0 END)",
    "reused_tokens": f"SUM(CASE WHEN {RAN} THEN cached_tokens ELSE 0 END)",
}
TOTAL = "''"  # the group expression of the whole window


def summaries(
    conn: sqlite3.Connection, where: str, args: list, by: str
) -> tuple[dict, dict[str, dict]]:
    """(the whole window's figures, each group's figures by key) for the rows ``where``."""
    total = _summaries(conn, where, args, TOTAL).get("", _summary({}, {}, {}, {}, {}))
    return total, _summaries(conn, where, args, GROUP_SQL[by])


def _summaries(conn: sqlite3.Connection, where: str, args: list, group: str) -> dict[str, dict]:
    sums = {}
    names = list(SUMS)
    select = ", ".join(SUMS[name] for name in names)
    for key, *values in conn.execute(
        f"SELECT {group}, {select} FROM requests{where} GROUP BY 1", args
    ):
        sums[key] = {name: value or 0 for name, value in zip(names, values, strict=True)}
    outcomes = _counts(conn, where, args, group, "outcome", "1")
    verdicts = _counts(conn, where, args, group, "verdict", SHOWN)
    stops = _counts(conn, where, args, group, "stop", f"{RAN} AND stop != ''")
    latency = {name: _percentiles(conn, where, args, group, name) for name in LATENCIES}
    return {
        key: _summary(sums[key], outcomes[key], verdicts[key], stops[key], latency, key)
        for key in sums
    }


def _counts(
    conn: sqlite3.Connection, where: str, args: list, group: str, column: str, among: str
) -> dict[str, dict]:
    """How many rows of each group have each value of ``column``, among the rows ``among``."""
    out: dict[str, dict] = defaultdict(dict)
    scope = f"{where} AND {among}" if where else f" WHERE {among}"
    for key, value, count in conn.execute(
        f"SELECT {group}, {column}, COUNT(*) FROM requests{scope} GROUP BY 1, 2", args
    ):
        out[key][value] = count
    return out


def _percentiles(
    conn: sqlite3.Connection, where: str, args: list, group: str, column: str
) -> dict[str, dict]:
    """Nearest-rank p50 / p95 / p99 of ``column`` per group, over the rows that ran: the
    value at rank ``ceil(p * n)`` (1-based) in each group's sorted values."""
    scope = f"{where} AND " if where else " WHERE "
    scope += f"{RAN} AND {column} IS NOT NULL"
    ranks = ", ".join(
        f"CAST({p} * n AS INTEGER) + ({p} * n > CAST({p} * n AS INTEGER))" for p in PS
    )
    rows = conn.execute(
        f"SELECT g, n, r, v FROM (SELECT {group} AS g, {column} AS v, "
        f"ROW_NUMBER() OVER (PARTITION BY {group} ORDER BY {column}) AS r, "
        f"COUNT(*) OVER (PARTITION BY {group}) AS n FROM requests{scope}) "
        f"WHERE r IN ({ranks})",
        args,
    )
    out: dict[str, dict] = {}
    for key, n, rank, value in rows:
        entry = out.setdefault(key, {"n": n})
        for p, name in zip(PS, ("p50", "p95", "p99"), strict=True):
            if rank == min(n, max(1, _ceil(p * n))):
                entry[name] = value
    return out


PS = (0.50, 0.95, 0.99)


def _ceil(x: float) -> int:
    return int(x) + (x > int(x))


def _summary(
    sums: dict, outcomes: dict, verdicts: dict, stops: dict, latency: dict, key: str = ""
) -> dict:
    def get(name: str) -> float:
        return sums.get(name, 0)

    served, shown = get("suggestions"), get("shown")
    return {
        "requests": get("requests"),
        "outcomes": dict(outcomes),
        "suggestions": served,
        "shown": shown,
        "accepted": verdicts.get("accepted", 0),
        "partial": verdicts.get("partial", 0),
        "rejected": verdicts.get("rejected", 0),
        "unjudged": verdicts.get(None, 0),
        "acceptance_rate": _ratio(verdicts.get("accepted", 0), shown),
        "partial_rate": _ratio(verdicts.get("partial", 0), shown),
        "accepted_chars": get("accepted_chars"),
        "shown_chars": get("shown_chars"),
        "char_acceptance_rate": _ratio(get("accepted_chars"), get("shown_chars")),
        "tokens": get("tokens"),
        "passes": get("passes"),
        "tokens_per_pass": _ratio(get("tokens"), get("passes")),
        "tokens_per_s": _ratio(get("tokens"), get("decode_s")),
        "ngram": _proposer(get("ngram_proposed"), get("ngram_accepted")),
        "draft": _proposer(get("draft_proposed"), get("draft_accepted")),
        "output": {
            "mean_tokens": _ratio(get("served_tokens"), served),
            "mean_chars": _ratio(get("served_chars"), served),
            "mean_lines": _ratio(get("served_lines"), served),
        },
        "stops": dict(stops),
        "latency_ms": {
            name: {"n": 0, "p50": None, "p95": None, "p99": None, **latency[name].get(key, {})}
            if latency
            else {"n": 0, "p50": None, "p95": None, "p99": None}
            for name in LATENCIES
        },
        "prompt": {
            "prefilled_tokens": get("prefilled_tokens"),
            "reused_tokens": get("reused_tokens"),
        },
    }


def _proposer(proposed: int, accepted: int) -> dict:
    return {"proposed": proposed, "accepted": accepted, "rate": _ratio(accepted, proposed)}


def _ratio(part: float, whole: float) -> float | None:
    return part / whole if whole else None
