"""Figures from the store's rows: per language, request kind or day, as JSON or a table.

``codespec stats`` and the ``codespec/stats`` LSP request both call ``build``; the HTML page
(``html.py``) draws the same figures.
"""

from __future__ import annotations

import re
import sqlite3
import time
from collections import Counter, defaultdict
from collections.abc import Iterable

from ..printable import printable
from ..sources import RECORDED_SOURCES
from .record import REQUEST_COLUMNS, Outcome, number, read
from .summary import LAST_DAY_S, UNKNOWN, percentiles, proposer, ratio, summaries

GROUPINGS = ("language", "kind", "day", "context", "client", "ending")
LATENCIES = ("queue_ms", "prefill_ms", "first_ms", "total_ms")
_SPAN = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


class ReportError(ValueError):
    """A bad filter; the message is one line for the user."""


def parse_since(text: str | None) -> float | None:
    """``7d``, ``12h``, ``30m``, ``2w``, ``90s`` -> seconds; None or ``all`` -> everything."""
    if text is None or text == "all":
        return None
    match = _SPAN.fullmatch(text.strip().lower()) if isinstance(text, str) else None
    if match is None:
        raise ReportError(f"--since wants a span like 7d, 12h, 30m or all, not {text!r}")
    return float(match.group(1)) * _UNIT_S[match.group(2)]


def window(since_s: float | None, language: str | None) -> tuple[str, list]:
    """The SQL ``WHERE`` clause (or "") and its arguments for a window and a language."""
    where, args = [f"{number('t')} IS NOT NULL"], []  # (a row without a time is in no window)
    if since_s is not None:
        where.append("t >= ?")
        args.append(time.time() - since_s)
    if language:
        where.append("language = ?")
        args.append(language)
    return (" WHERE " + " AND ".join(where) if where else ""), args


def fetch(
    conn: sqlite3.Connection, since_s: float | None = None, language: str | None = None
) -> list[dict]:
    """The rows in the window, oldest first (for the HTML page's charts)."""
    where, args = window(since_s, language)
    names = list(REQUEST_COLUMNS)
    query = f"SELECT {', '.join(map(read, names))} FROM requests{where} ORDER BY t"
    return [dict(zip(names, row, strict=True)) for row in conn.execute(query, args)]


def shown_and_accepted(conn: sqlite3.Connection, since_t: float) -> tuple[int, int]:
    """Suggestions shown, and of those accepted, in requests since ``since_t`` (epoch seconds)."""
    shown, accepted = conn.execute(
        "SELECT COALESCE(SUM(shown), 0), COALESCE(SUM(verdict = 'accepted'), 0) "
        "FROM requests WHERE t >= ?",
        (since_t,),
    ).fetchone()
    return int(shown), int(accepted)


def query(conn: sqlite3.Connection, since: str | None, language: object, by: object) -> dict:
    """Check the filters a user or client gave, then the report for them, computed in SQLite
    (``summary.py``; the one path for ``codespec stats`` and the ``codespec/stats`` request)."""
    since_s = parse_since(since)
    if language is not None and not isinstance(language, str):
        raise ReportError("language must be a string")
    by = by if isinstance(by, str) else repr(by)
    if by not in GROUPINGS:
        raise ReportError(f"--by wants one of {', '.join(GROUPINGS)}, not {by!r}")
    where, args = window(since_s, language)
    total, groups = summaries(conn, where, args, by)
    return {
        "filters": {"since": since or "all", "language": language, "by": by},
        "total": total,
        "groups": [{"key": key, **groups[key]} for key in sorted(groups)],
    }


def group_key(row: dict, by: str) -> str:
    """A row's group, as ``summary.GROUP_SQL`` computes it in SQLite: always text."""
    if by == "kind":
        return f"{row['kind']}/{row['trigger']}"
    if by == "day":
        return day_of(row["t"])
    if by == "context":  # acceptance per language and the context sources its prompts held
        sources = (row.get("context") or "").replace(",", "+")
        return f"{row['language']} {sources or 'in-file'}"
    if by == "client":
        return row.get("client") or UNKNOWN
    if by == "ending":
        return f"{row['kind']}: {row.get('stop') or row['outcome']}"
    return str(row["language"]) if row["language"] is not None else UNKNOWN


def day_of(t: object) -> str:
    """The local day of a row's time, or ``UNKNOWN`` for a time no calendar names."""
    if isinstance(t, bool) or not isinstance(t, int | float) or not 0 <= t <= LAST_DAY_S:
        return UNKNOWN
    return time.strftime("%Y-%m-%d", time.localtime(t))


def build(
    rows: list[dict],
    by: str = "language",
    since: str | None = None,
    language: str | None = None,
) -> dict:
    """Every figure, for the whole window and per group."""
    if by not in GROUPINGS:
        raise ReportError(f"--by wants one of {', '.join(GROUPINGS)}, not {by!r}")
    groups: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        groups[group_key(row, by)].append(row)
    return {
        "filters": {"since": since or "all", "language": language, "by": by},
        "total": summarize(rows),
        "groups": [{"key": key, **summarize(group)} for key, group in sorted(groups.items())],
    }


def summarize(rows: list[dict]) -> dict:
    ran = [r for r in rows if r["outcome"] in (Outcome.SERVED, Outcome.EMPTY)]
    served = [r for r in rows if r["outcome"] == Outcome.SERVED]
    shown = [r for r in served if r["shown"]]
    verdicts = Counter(r["verdict"] for r in shown)
    tokens = sum(r["tokens"] for r in ran)
    passes = sum(r["passes"] for r in ran)
    decode_s = sum(r["decode_s"] for r in ran)
    shown_chars = sum(r["chars"] for r in shown)
    accepted_chars = sum(r["accepted_chars"] for r in shown)
    return {
        "requests": len(rows),
        "outcomes": dict(Counter(r["outcome"] for r in rows)),
        "suggestions": len(served),
        "shown": len(shown),
        "accepted": verdicts["accepted"],
        "partial": verdicts["partial"],
        "rejected": verdicts["rejected"],
        "unjudged": verdicts[None],
        "acceptance_rate": ratio(verdicts["accepted"], len(shown)),
        "partial_rate": ratio(verdicts["partial"], len(shown)),
        "accepted_chars": accepted_chars,
        "shown_chars": shown_chars,
        "char_acceptance_rate": ratio(accepted_chars, shown_chars),
        "tokens": tokens,
        "passes": passes,
        "tokens_per_pass": ratio(tokens, passes),
        "tokens_per_s": ratio(tokens, decode_s),
        **{source: _proposer(ran, source) for source in RECORDED_SOURCES},
        "output": {
            "mean_tokens": _mean(r["tokens"] for r in served),
            "mean_chars": _mean(r["chars"] for r in served),
            "mean_lines": _mean(r["lines"] for r in served),
        },
        "stops": dict(Counter(r["stop"] for r in ran if r["stop"])),
        "latency_ms": {
            name: percentiles([r[name] for r in ran if r[name] is not None]) for name in LATENCIES
        },
        "prompt": {
            "prefilled_tokens": sum(r["prefill_tokens"] for r in ran),
            "reused_tokens": sum(r["cached_tokens"] for r in ran),
        },
    }


def _proposer(rows: list[dict], name: str) -> dict:
    proposed = sum(r[f"{name}_proposed"] for r in rows)
    accepted = sum(r[f"{name}_accepted"] for r in rows)
    return proposer(proposed, accepted)


def _mean(values: Iterable[float]) -> float | None:
    values = list(values)
    return sum(values) / len(values) if values else None


# -- the terminal table -----------------------------------------------------------------------

COLUMNS = (
    ("requests", lambda g: str(g["requests"])),
    ("shown", lambda g: str(g["shown"])),
    ("accepted", lambda g: f"{_pct(g['acceptance_rate'])} / {_pct(g['char_acceptance_rate'])}"),
    ("partial", lambda g: str(g["partial"])),
    ("tok/pass", lambda g: _num(g["tokens_per_pass"], 2)),
    ("n-gram", lambda g: _pct(g["ngram"]["rate"])),
    ("workspace", lambda g: _pct(g["workspace"]["rate"])),  # the workspace drafter
    ("draft", lambda g: _pct(g["draft"]["rate"])),
    ("server spec", lambda g: _pct(g["server"]["rate"])),  # a remote engine's own drafts
    ("tok/s", lambda g: _num(g["tokens_per_s"], 1)),
    ("first p50/p95", lambda g: _pair_ms(g["latency_ms"]["first_ms"])),
    ("total p50/p95", lambda g: _pair_ms(g["latency_ms"]["total_ms"])),
    ("mean tokens", lambda g: _num(g["output"]["mean_tokens"], 1)),
)


def _label(key: object) -> str:
    """A group's key as a terminal may show it: a client sends languageIds, and an escape
    sequence in one must not reach the user's terminal."""
    return printable(key)


def table(report: dict) -> str:
    """A fixed-width table: one row per group and a total row."""
    by = report["filters"]["by"]
    header = [by, *(name for name, _ in COLUMNS)]
    body = [[_label(g["key"]), *(cell(g) for _, cell in COLUMNS)] for g in report["groups"]]
    body.append(["total", *(cell(report["total"]) for _, cell in COLUMNS)])
    widths = [max(len(str(row[i])) for row in [header, *body]) for i in range(len(header))]
    lines = [
        "  ".join(
            str(v).ljust(w) if i == 0 else str(v).rjust(w)
            for i, (v, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in [header, *body]
    ]
    lines.insert(1, "-" * len(lines[0]))
    lines.insert(len(lines) - 1, "-" * len(lines[0]))
    lines.append(
        "accepted: share of suggestions shown accepted in full, by count / by characters; "
        "latency: request to first streamed text and to the answer (ms)"
    )
    return "\n".join(lines)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def _num(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _pair_ms(p: dict) -> str:
    if p["p50"] is None:
        return "-"
    return f"{p['p50']:.0f}/{p['p95']:.0f}"
