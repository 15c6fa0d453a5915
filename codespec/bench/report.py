"""Turn per-hole records into figures: aggregates per language and hole kind, the terminal
table, the docs section and its plots."""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ..engine.proposers import SOURCES


def percentile(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def rate(run: dict) -> float:
    """Tokens per second of one completion."""
    return run["tokens"] / run["total_ms"] * 1000 if run["total_ms"] else 0.0


# -- pricing passes: the speedup without the machine's timing noise ----------------------------
#
# On a shared machine one pass's time moves from one second to the next (``docs/benchmarks.md``,
# "Measurements behind the code"), so a slice of one or two short completions can come out a
# few percent either side of 1.0x for reasons that have nothing to do with speculation.
# Pricing each run's passes at the median time of all passes of that width in the whole run
# (both modes, every hole) removes that noise and keeps what the speculation policy did: how
# many passes, how wide.


def pass_prices(rows: list[dict]) -> dict[int, float]:
    """Median milliseconds of a decode pass of each width, over every hole and both modes."""
    seen: dict[int, list[float]] = {}
    for row in rows:
        for run in (row["spec"], row["plain"]):
            for width, ms in zip(run.get("pass_widths", ()), run.get("pass_ms", ()), strict=True):
                seen.setdefault(width, []).append(ms)
    return {width: statistics.median(ms) for width, ms in sorted(seen.items())}


def priced_ms(run: dict, prices: dict[int, float], first_ms: float) -> float | None:
    """A run's time with each decode pass at its width's price and ``first_ms`` for the first
    token (the same prefill in both modes); None for a record without its passes."""
    if "pass_widths" not in run:
        return None
    return first_ms + sum(prices[width] for width in run["pass_widths"])


def priced_pair(row: dict, prices: dict[int, float]) -> tuple[float, float] | None:
    """(speculative, plain) priced milliseconds of one hole, the first token at both runs'
    mean time to it."""
    spec, plain = row["spec"], row["plain"]
    first_ms = (spec["ttft_ms"] + plain["ttft_ms"]) / 2
    spec_ms, plain_ms = priced_ms(spec, prices, first_ms), priced_ms(plain, prices, first_ms)
    if spec_ms is None or plain_ms is None:
        return None
    return spec_ms, plain_ms


def aggregate(rows: list[dict], prices: dict[int, float] | None = None) -> dict:
    """Figures over a set of holes. Speeds are ratios of sums over the same holes (speculative
    tokens/s over plain tokens/s), so long completions weigh more than short ones. With
    ``prices`` (``pass_prices`` of the whole run), ``priced_speedup`` is the same ratio with
    every pass at its width's price: what the policy chose, without the timing noise."""
    if not rows:
        return {"holes": 0}
    spec_tokens = sum(r["spec"]["tokens"] for r in rows)
    plain_tokens = sum(r["plain"]["tokens"] for r in rows)
    spec_s = sum(r["spec"]["total_ms"] for r in rows) / 1000
    plain_s = sum(r["plain"]["total_ms"] for r in rows) / 1000
    proposed = {k: sum(r["spec"]["proposed"].get(k, 0) for r in rows) for k in SOURCES}
    accepted = {k: sum(r["spec"]["accepted"].get(k, 0) for r in rows) for k in SOURCES}
    ratios = [
        rate(r["spec"]) / rate(r["plain"])
        for r in rows
        if r["spec"]["tokens"] and r["plain"]["tokens"]
    ]

    def col(key: str) -> list[float]:
        return [r[key] for r in rows]

    def run_col(run: str, key: str) -> list[float]:
        return [r[run][key] for r in rows]

    spec_tok_s = spec_tokens / spec_s if spec_s else None
    plain_tok_s = plain_tokens / plain_s if plain_s else None
    found = [priced_pair(r, prices) for r in rows] if prices else []
    priced = [p for p in found if p is not None]
    priced_speedup = None
    if priced and len(priced) == len(found) and spec_tokens and plain_tokens:
        spec_priced, plain_priced = (sum(p[i] for p in priced) for i in (0, 1))
        priced_speedup = (spec_tokens / spec_priced) / (plain_tokens / plain_priced)
    return dict(
        holes=len(rows),
        speedup=spec_tok_s / plain_tok_s if spec_tok_s and plain_tok_s else None,
        priced_speedup=priced_speedup,
        speedup_median=statistics.median(ratios) if ratios else None,
        spec_tok_s=spec_tok_s,
        plain_tok_s=plain_tok_s,
        exact=sum(col("exact")) / len(rows),
        mismatches=[
            f"{r['hole']['package']} {r['hole']['file']}:{r['hole']['line']} "
            f"(top-2 logit gap {r['divergence_logit_gap']:.3f}"
            + (
                f"; {r['divergence_fresh_gap']:.3f} after a fresh prefill)"
                if r.get("divergence_fresh_gap") is not None
                else ")"
            )
            for r in rows
            if not r["exact"]
        ],
        tokens_per_pass=spec_tokens / max(sum(run_col("spec", "passes")), 1),
        tokens=spec_tokens,
        proposed=proposed,
        accepted=accepted,
        acceptance={k: accepted[k] / proposed[k] if proposed[k] else None for k in SOURCES},
        draft_passes=sum(run_col("spec", "draft_passes")),
        draft_decisions={
            k: sum(r["draft_decisions"].get(k, 0) for r in rows)
            for k in ("draft_on", "draft_off", "probes")
        },
        exact_match=sum(col("exact_match")) / len(rows),
        edit_similarity=statistics.mean(col("edit_similarity")),
        parse_ok=sum(col("parse_ok")) / len(rows),
        ttft_ms_p50=percentile(col("ttft_ms"), 50),
        ttft_ms_p95=percentile(col("ttft_ms"), 95),
        cold_ttft_ms_p50=percentile(col("cold_ttft_ms"), 50),
        cold_ttft_ms_p95=percentile(col("cold_ttft_ms"), 95),
        total_ms_p50=percentile(run_col("spec", "total_ms"), 50),
        total_ms_p95=percentile(run_col("spec", "total_ms"), 95),
        plain_total_ms_p50=percentile(run_col("plain", "total_ms"), 50),
        plain_total_ms_p95=percentile(run_col("plain", "total_ms"), 95),
        bets=bet_totals(bets_of(rows)),
    )


def bets_of(rows: list[dict]) -> list[list[float]]:
    """Every bet of the speculative runs of ``rows``, in order: ``[first-token rate, expected
    kept, variance of kept, kept]`` each (``GenerationStats.bets``)."""
    return [bet for r in rows for bet in r["spec"].get("bets", [])]


def bet_totals(bets: list[list[float]]) -> dict:
    """The policy's bets over some holes (``GenerationStats.bets``): how many, the tokens they
    were expected to keep, the tokens they kept, and the standard deviation of that count if
    each token is kept with its predicted probability (a slice whose bets kept well under what
    was expected, in these units, has a policy that misjudged it; within ~2, the luck of a few
    bets)."""
    expected = sum(b[1] for b in bets)
    sd = math.sqrt(sum(b[2] for b in bets))
    kept = sum(b[3] for b in bets)
    return dict(
        count=len(bets),
        expected=expected,
        kept=kept,
        sd=sd,
        z=(kept - expected) / sd if sd > 0 else None,
    )


CALIBRATION_BINS = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)


def bet_calibration(rows: list[dict]) -> list[dict]:
    """How often a bet's first token was kept, by its predicted rate (bins of 0.2): whether
    the policy's acceptance estimates are right."""
    bets = bets_of(rows)
    out = []
    for lo, hi in itertools.pairwise(CALIBRATION_BINS):
        inside = [b for b in bets if lo <= b[0] < hi or (hi == 1.0 and b[0] == 1.0)]
        if inside:
            out.append(
                dict(
                    low=lo,
                    high=hi,
                    bets=len(inside),
                    predicted=statistics.mean(b[0] for b in inside),
                    kept=sum(b[3] >= 1 for b in inside) / len(inside),
                )
            )
    return out


def group(rows: list[dict], key: Callable[[dict], str]) -> dict[str, list[dict]]:
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(key(row), []).append(row)
    return groups


def summarize(rows: list[dict]) -> dict:
    by_language = group(rows, lambda r: r["hole"]["language"])
    prices = pass_prices(rows)

    def figures(rs: list[dict]) -> dict:
        return aggregate(rs, prices)

    by_language_kind = {
        lang: {k: figures(g) for k, g in group(rs, lambda r: r["hole"]["kind"]).items()}
        for lang, rs in sorted(by_language.items())
    }
    return dict(
        overall=figures(rows),
        by_language={lang: figures(rs) for lang, rs in sorted(by_language.items())},
        by_kind={k: figures(rs) for k, rs in group(rows, lambda r: r["hole"]["kind"]).items()},
        by_language_kind=by_language_kind,
        pass_prices_ms=prices,
        slices_below_one=slices_below_one(by_language_kind),
        timing_noise=timing_noise(rows, prices),
        bet_calibration=bet_calibration(rows),
        threads=threads_used(rows),
    )


def threads_used(rows: list[dict]) -> dict[int, int]:
    """How many timed runs (plain and speculative) ran on each number of threads: fewer
    where other processes kept cores busy (``machine.FreeCores``)."""
    counts: dict[int, int] = {}
    for row in rows:
        for run in (row["spec"], row["plain"]):
            if run.get("threads"):
                counts[run["threads"]] = counts.get(run["threads"], 0) + 1
    return dict(sorted(counts.items()))


def threads_text(threads: dict) -> str:
    """'threads: 2 for 30 runs, 1 for 10 runs'."""
    return "threads: " + ", ".join(f"{n} for {count} runs" for n, count in threads.items())


def slices_below_one(by_language_kind: dict) -> dict[str, list[str]]:
    """The language x kind slices whose speedup is under 1.0, measured and priced, and what
    the bets of each priced one kept against what was expected of them."""
    below: dict[str, list[str]] = {"speedup": [], "priced_speedup": [], "priced_bets": []}
    for lang, kinds in by_language_kind.items():
        for kind, figures in kinds.items():
            for key in ("speedup", "priced_speedup"):
                if figures.get(key) is not None and figures[key] < 1.0:
                    below[key].append(f"{lang} {kind} {figures[key]:.2f}x")
            if (figures.get("priced_speedup") or 1.0) < 1.0 and figures["bets"]["count"]:
                below["priced_bets"].append(f"{lang} {kind} {bet_text(figures['bets'])}")
    return below


def bet_text(bets: dict) -> str:
    """'kept 2 tokens of 3.4 expected (-0.9 sd, 4 bets)'."""
    z = f"{bets['z']:+.1f} sd, " if bets["z"] is not None else ""
    tokens = "token" if bets["kept"] == 1 else "tokens"
    count = "1 bet" if bets["count"] == 1 else f"{bets['count']} bets"
    return f"kept {bets['kept']} {tokens} of {bets['expected']:.1f} expected ({z}{count})"


def calibration_text(calibration: list[dict]) -> str:
    """'0.2-0.4: 0.30 -> 0.31 (120 bets), ...': predicted against kept, by predicted rate."""
    return ", ".join(
        f"{c['low']:.1f}-{c['high']:.1f}: {c['predicted']:.2f} -> {c['kept']:.2f} ({c['bets']})"
        for c in calibration
    )


def timing_noise(rows: list[dict], prices: dict[int, float]) -> float | None:
    """How far a hole's measured speedup strays from its priced one, typically: the median of
    |measured / priced - 1| over the holes (the noise a one-hole slice's speedup carries)."""
    strays = []
    for row in rows:
        priced = priced_pair(row, prices) if prices else None
        if priced and row["spec"]["total_ms"] and row["plain"]["total_ms"]:
            measured = row["plain"]["total_ms"] / row["spec"]["total_ms"]
            strays.append(abs(measured / (priced[1] / priced[0]) - 1))
    return statistics.median(strays) if strays else None


# -- the terminal table ---------------------------------------------------------------------

COLUMNS = (
    ("holes", "holes", "{:d}"),
    ("speedup", "speedup", "{:.2f}x"),
    ("priced_speedup", "priced", "{:.2f}x"),
    ("exact", "exact", "{:.0%}"),
    ("tokens_per_pass", "tok/pass", "{:.2f}"),
    ("exact_match", "exact-match", "{:.0%}"),
    ("edit_similarity", "edit-sim", "{:.2f}"),
    ("parse_ok", "parses", "{:.0%}"),
    ("ttft_ms_p50", "ttft p50", "{:.0f} ms"),
    ("cold_ttft_ms_p50", "cold ttft", "{:.0f} ms"),
    ("total_ms_p50", "total p50", "{:.0f} ms"),
)


def fmt(value, pattern: str) -> str:
    """``pattern`` applied to ``value``, or "-" for a figure that was not measured."""
    return "-" if value is None else pattern.format(value)


def table(summary: dict) -> str:
    """Rows per language, per hole kind, and overall."""
    head = ["slice"] + [title for _, title, _ in COLUMNS]
    body = []
    for section in ("by_language", "by_kind"):
        for name, figures in summary[section].items():
            body.append([name] + [fmt(figures.get(k), f) for k, _, f in COLUMNS])
    body.append(["overall"] + [fmt(summary["overall"].get(k), f) for k, _, f in COLUMNS])
    widths = [max(len(row[i]) for row in [head, *body]) for i in range(len(head))]

    def line(row: list[str]) -> str:
        cells = [c.rjust(w) for c, w in zip(row, widths, strict=True)]
        return "  ".join([row[0].ljust(widths[0]), *cells[1:]])

    rule = "-" * len(line(head))
    return "\n".join([line(head), rule, *map(line, body[:-1]), rule, line(body[-1])])


def markdown_table(summary: dict) -> list[str]:
    head = ["slice"] + [title for _, title, _ in COLUMNS]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for section in ("by_language", "by_kind"):
        for name, figures in summary[section].items():
            cells = [fmt(figures.get(k), f) for k, _, f in COLUMNS]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    cells = [fmt(summary["overall"].get(k), f) for k, _, f in COLUMNS]
    lines.append("| **overall** | " + " | ".join(cells) + " |")
    return lines


# -- plots --------------------------------------------------------------------------------------


def plot(summary: dict, out_dir: Path) -> list[Path]:
    """Speedup and acceptance per language as PNG bar charts (needs matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    langs = list(summary["by_language"])
    kinds = list(summary["by_kind"])
    x = np.arange(len(langs))
    width = 0.8 / max(len(kinds), 1)

    fig, ax = plt.subplots(figsize=(10, 4.2))
    for i, kind in enumerate(kinds):
        values = [
            summary["by_language_kind"][lang].get(kind, {}).get("speedup") or 0 for lang in langs
        ]
        ax.bar(x + (i - (len(kinds) - 1) / 2) * width, values, width, label=kind)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(x, langs, rotation=30, ha="right")
    ax.set_ylabel("speculative / plain tokens per second")
    ax.set_title("Speedup of speculative over plain greedy decoding, per language and hole kind")
    ax.legend(ncols=len(kinds), fontsize=8)
    fig.tight_layout()
    speedup_png = out_dir / "bench-speedup.png"
    fig.savefig(speedup_png, dpi=110)
    plt.close(fig)

    series = {
        "n-gram tokens accepted / proposed": [
            summary["by_language"][lang]["acceptance"]["ngram"] or 0 for lang in langs
        ],
        "exact match with the removed text": [
            summary["by_language"][lang]["exact_match"] for lang in langs
        ],
        "edit similarity with the removed text": [
            summary["by_language"][lang]["edit_similarity"] for lang in langs
        ],
        "file parses after the completion": [
            summary["by_language"][lang]["parse_ok"] for lang in langs
        ],
    }
    fig, ax = plt.subplots(figsize=(10, 4.2))
    width = 0.8 / len(series)
    for i, (label, values) in enumerate(series.items()):
        ax.bar(x + (i - (len(series) - 1) / 2) * width, values, width, label=label)
    ax.set_xticks(x, langs, rotation=30, ha="right")
    ax.set_ylim(0, 1.15)
    ax.set_title("Acceptance per language: speculation and completion quality")
    ax.legend(ncols=2, fontsize=8)
    fig.tight_layout()
    acceptance_png = out_dir / "bench-acceptance.png"
    fig.savefig(acceptance_png, dpi=110)
    plt.close(fig)
    return [speedup_png, acceptance_png]
