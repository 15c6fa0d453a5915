"""``codespec stats --html FILE``: one self-contained page (inline SVG charts drawn by
matplotlib, no script, nothing fetched at view time) with the report's figures."""

from __future__ import annotations

import html
import io
import time

from .record import Outcome
from .report import COLUMNS, ReportError, build


def page(rows: list[dict], report: dict, store: str) -> str:
    """The whole page; ``report`` is ``build(rows, ...)`` as the user asked for it."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ReportError(
            "--html needs matplotlib: .venv/bin/pip install 'codespec[report]'"
        ) from None
    plt.rcParams.update({"svg.fonttype": "path", "font.size": 9})
    by_language = build(rows, "language")["groups"]
    by_day = build(rows, "day")["groups"]
    charts = [
        _acceptance_by_language(plt, by_language),
        _speculation_by_language(plt, by_language),
        _latency(plt, rows),
        _over_time(plt, by_day),
    ]
    filters = report["filters"]
    title = f"codespec acceptance: {filters['since']}" + (
        f", {filters['language']}" if filters["language"] else ""
    )
    return "\n".join(
        [
            "<!doctype html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f"<title>{html.escape(title)}</title>",
            "<style>body{font-family:sans-serif;max-width:70em;margin:2em auto;color:#222}"
            "table{border-collapse:collapse}td,th{padding:.2em .6em;border-bottom:1px solid #ddd;"
            "text-align:right}td:first-child,th:first-child{text-align:left}"
            "figure{margin:1.5em 0}</style></head><body>",
            f"<h1>{html.escape(title)}</h1>",
            f"<p>{report['total']['requests']} requests, {report['total']['shown']} suggestions "
            f"shown; store {html.escape(store)}; made {time.strftime('%Y-%m-%d %H:%M')}. "
            "No source code is stored: only lengths, counts, timings, languages and kinds.</p>",
            _table(report),
            *(f"<figure>{svg}</figure>" for svg in charts),
            "</body></html>",
        ]
    )


def _table(report: dict) -> str:
    by = report["filters"]["by"]
    head = "".join(f"<th>{html.escape(n)}</th>" for n in [by, *(n for n, _ in COLUMNS)])
    rows = [
        "<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in [key, *cells]) + "</tr>"
        for key, cells in [
            *((g["key"], [cell(g) for _, cell in COLUMNS]) for g in report["groups"]),
            ("total", [cell(report["total"]) for _, cell in COLUMNS]),
        ]
    ]
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def _svg(plt, fig) -> str:
    out = io.StringIO()
    fig.tight_layout()
    fig.savefig(out, format="svg", metadata={"Date": None})
    plt.close(fig)
    text = out.getvalue()
    return text[text.index("<svg") :]  # drop the XML prolog: the SVG sits inside HTML


def _bars(ax, names: list[str], series: dict[str, list[float]], ylabel: str) -> None:
    width = 0.8 / max(len(series), 1)
    for i, (label, values) in enumerate(series.items()):
        ax.bar([x + i * width for x in range(len(names))], values, width, label=label)
    ax.set_xticks([x + width * (len(series) - 1) / 2 for x in range(len(names))], names)
    ax.set_xlim(-0.5, len(names) - 0.5 + width * (len(series) - 1))  # one group stays narrow
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8)


def _acceptance_by_language(plt, groups: list[dict]) -> str:
    fig, ax = plt.subplots(figsize=(8, 3))
    names = [g["key"] for g in groups]
    _bars(
        ax,
        names,
        {
            "accepted (count)": [100 * (g["acceptance_rate"] or 0) for g in groups],
            "accepted (characters)": [100 * (g["char_acceptance_rate"] or 0) for g in groups],
            "partially accepted": [100 * (g["partial_rate"] or 0) for g in groups],
        },
        "% of suggestions shown",
    )
    ax.set_title("Acceptance by language")
    return _svg(plt, fig)


def _speculation_by_language(plt, groups: list[dict]) -> str:
    fig, (left, right) = plt.subplots(1, 2, figsize=(8, 3))
    names = [g["key"] for g in groups]
    _bars(
        left,
        names,
        {
            "n-gram": [100 * (g["ngram"]["rate"] or 0) for g in groups],
            "workspace": [100 * (g["workspace"]["rate"] or 0) for g in groups],
            "draft": [100 * (g["draft"]["rate"] or 0) for g in groups],
        },
        "% of proposed tokens accepted",
    )
    left.set_title("Speculation acceptance")
    _bars(right, names, {"tokens per target pass": [g["tokens_per_pass"] or 0 for g in groups]}, "")
    right.set_title("Tokens per target pass")
    return _svg(plt, fig)


def _latency(plt, rows: list[dict]) -> str:
    fig, ax = plt.subplots(figsize=(8, 3))
    for name, label in (("first_ms", "to first text"), ("total_ms", "to the whole answer")):
        values = [r[name] for r in rows if r[name] is not None and r["outcome"] == Outcome.SERVED]
        if values:
            ax.hist(values, bins=30, alpha=0.6, label=f"{label} (n={len(values)})")
    ax.set_xlabel("ms after the request")
    ax.set_ylabel("requests")
    ax.set_title("Latency")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    return _svg(plt, fig)


def _over_time(plt, days: list[dict]) -> str:
    fig, ax = plt.subplots(figsize=(8, 3))
    names = [g["key"] for g in days]
    ax.plot(names, [100 * (g["acceptance_rate"] or 0) for g in days], marker="o", label="count")
    ax.plot(
        names, [100 * (g["char_acceptance_rate"] or 0) for g in days], marker="o", label="chars"
    )
    ax.set_ylabel("% of shown accepted")
    ax.set_title("Acceptance over time")
    ax.legend(fontsize=8)
    ax.tick_params(axis="x", labelrotation=30)
    return _svg(plt, fig)
