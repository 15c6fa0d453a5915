"""`codespec bench --edits`: next edits on cases cut from the corpus (``edit_cases.py``).

Each case is asked as the daemon asks it (``nextedit/suggest.py``: Sweep's prompt, the window
as its own draft, the stops, the edits worth showing), from a cold prompt, so its latency
includes the prompt's prefill; then the same window is written plain (one token a pass, the
prompt now cached), which is what speculation's speedup is measured against and what its
output must equal.

What is shown depends on the user's ``nextEditEagerness`` (``nextedit/edits.py``, EAGERNESS):
each case's edit and its confidence are judged at every level, so one run says how often
each level keeps the right edits and how often it draws one where none was needed.
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from .. import machine
from ..languages import LANGUAGES, language_for
from ..nextedit import guard
from ..nextedit.edits import EAGERNESS, LineEdit, window_edits
from ..nextedit.suggest import NextEdit, suggest
from ..stats.summary import percentiles
from . import sources
from .edit_cases import DEFAULT_LANGUAGES, EditCase, cut
from .inputs import BenchError, command_line, load_pair, names

DEFAULT_LEVEL = "medium"


def applied(window: str, edit: LineEdit | None) -> str:
    """``window`` with ``edit`` applied (None: as it is)."""
    if edit is None:
        return window
    return guard.applied(window, edit.first, edit.end, edit.new)[0]


def guarded(case: EditCase, found: NextEdit, explained: bool = True) -> str | None:
    """Why the daemon would not show the edit found (``nextedit/guard.py``; None: it would):
    the whole file after it checked, as the daemon checks it (``explained``: whether the edit
    must follow from the recent edits, as below the eagerness ``high``)."""
    if found.hunk is None:
        return None
    language = language_for(case.language)
    window = found.window.first
    return guard.judged(language, case.text, window, found.hunk, case.history(), explained)


def judged(
    case: EditCase, found: NextEdit, refused: str | None = None, refused_high: str | None = None
) -> dict:
    """At each eagerness level: whether an edit is shown (not where the guard refused it),
    whether the window it makes is the expected one, and the share of the expected changed
    lines it gets right."""
    current = case.window().text
    want = case.expected.splitlines(keepends=True)
    sites = [k for k, line in enumerate(current.splitlines(keepends=True)) if want[k] != line]
    levels = {}
    for level, least in EAGERNESS.items():
        why_not = refused_high if level == "high" else refused
        shown = found.hunk is not None and found.confidence >= least and why_not is None
        result = applied(current, found.hunk if shown else None)
        got = result.splitlines(keepends=True)
        fixed = sum(1 for k in sites if k < len(got) and got[k] == want[k])
        levels[level] = {
            "shown": shown,
            "exact": result == case.expected,
            "partial": fixed / len(sites) if sites else None,
            "over_reach": shown and _reaches_past(found.hunk, sites),
        }
    return levels


def _reaches_past(hunk: LineEdit | None, sites: list[int]) -> bool:
    """Whether ``hunk`` changes a line the expected edit leaves as it is."""
    if hunk is None:
        return False
    changed = window_edits(hunk.old, hunk.new)
    touched = {hunk.first + k for e in changed for k in range(e.first, max(e.end, e.first + 1))}
    return bool(touched - set(sites))


def run_case(pair, separator: str, case: EditCase) -> dict:
    """One case: speculative from a cold prompt (timed whole), the same request again on the
    warm document (its prompt cached, as a second request in a file finds it), then plain."""

    def timed(speculate: bool = True) -> tuple[NextEdit, float]:
        t0 = time.perf_counter()
        found = suggest(
            pair.engine, pair.tokenizer, separator, case.path, case.text, case.line,
            case.history(), speculate=speculate,
        )  # fmt: skip
        return found, time.perf_counter() - t0

    found, latency = timed()
    _, warm_latency = timed()
    plain, _ = timed(speculate=False)
    stats = found.stats
    refused, refused_high = guarded(case, found), guarded(case, found, explained=False)
    return {
        "language": case.language,
        "kind": case.kind,
        "origin": case.origin,
        "latency_s": latency,
        "warm_latency_s": warm_latency,
        "prefill_s": stats.prefill_s,
        "prompt_tokens": found.prompt_tokens,
        "prefill_tokens": stats.prefill_tokens,
        "tokens": len(found.tokens),
        "passes": stats.target_passes + 1,
        "generation_s": stats.total_s - stats.prefill_s,
        "plain_generation_s": plain.stats.total_s - plain.stats.prefill_s,
        "plain_passes": plain.stats.target_passes + 1,
        "same": plain.tokens == found.tokens,
        "confidence": found.confidence if found.hunk is not None else None,
        "refused": refused,
        "levels": judged(case, found, refused, refused_high),
    }


def run_edits(pair, cases: list[EditCase], log: Callable[[str], None]) -> dict:
    separator = pair.manifest.tokens.file_sep
    if not separator:
        raise ValueError("this model has no repository tokens: it cannot be asked next edits")
    rows = []
    for i, case in enumerate(cases):
        row = run_case(pair, separator, case)
        rows.append(row)
        level = row["levels"][DEFAULT_LEVEL]
        verdict = "exact" if level["exact"] else ("shown" if level["shown"] else "none")
        log(
            f"[{i + 1}/{len(cases)}] {case.language} {case.kind} {case.origin}: {verdict}, "
            f"{row['latency_s']:.1f} s ({row['prefill_s']:.1f} s prefill), "
            f"{row['tokens'] / row['passes']:.1f} tokens/pass, "
            f"{row['plain_generation_s'] / max(row['generation_s'], 1e-9):.1f}x plain"
        )
    languages = sorted({r["language"] for r in rows})
    summary = {lang: summarize([r for r in rows if r["language"] == lang]) for lang in languages}
    summary["all"] = summarize(rows)
    return {"rows": rows, "summary": summary}


def summarize(rows: list[dict]) -> dict:
    follow = [r for r in rows if r["kind"] != "comment"]
    none_needed = [r for r in rows if r["kind"] == "comment"]
    generation = sum(r["generation_s"] for r in rows)
    latency = percentiles([r["latency_s"] for r in rows])
    latency_total = sum(r["latency_s"] for r in rows)
    levels = {}
    for level in EAGERNESS:
        partial = [r["levels"][level]["partial"] for r in follow]
        levels[level] = {
            "exact": _share([r["levels"][level]["exact"] for r in follow]),
            "partial": statistics.fmean(partial) if partial else None,
            "drawn_when_none": _share([r["levels"][level]["shown"] for r in none_needed]),
            # of the edits shown where one was needed: those changing a line it leaves be
            "over_reach": _share(
                [r["levels"][level]["over_reach"] for r in follow if r["levels"][level]["shown"]]
            ),
        }
    return {
        "cases": len(rows),
        "follow_cases": len(follow),
        "none_cases": len(none_needed),
        "levels": levels,
        "latency_p50_s": latency["p50"],
        "latency_p95_s": latency["p95"],
        "warm_latency_p50_s": percentiles([r["warm_latency_s"] for r in rows])["p50"],
        "prefill_share": sum(r["prefill_s"] for r in rows) / max(latency_total, 1e-9),
        "generation_p50_s": statistics.median(r["generation_s"] for r in rows) if rows else None,
        "tokens_per_pass": sum(r["tokens"] for r in rows) / max(sum(r["passes"] for r in rows), 1),
        "speedup": sum(r["plain_generation_s"] for r in rows) / max(generation, 1e-9),
        "same": sum(1 for r in rows if r["same"]),
        # edits the guard kept from the user, by reason (the rows above count them as not shown)
        "refused": dict(Counter(r["refused"] for r in rows if r.get("refused"))),
    }


def _share(flags: list[bool]) -> float | None:
    return sum(flags) / len(flags) if flags else None


def table(summary: dict) -> str:
    """The figures per language (at the default eagerness), then each level over all."""
    head = (
        "| language | cases | exact | partial | drawn where none needed | over-reach "
        "| p50 s | p95 s | warm p50 s "
        "| prefill share | tokens/pass | speedup over plain | same as plain | refused |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for key, s in summary.items():
        level = s["levels"][DEFAULT_LEVEL]
        lines.append(
            f"| {key} | {s['cases']} | {_pct(level['exact'])} | {_pct(level['partial'])} "
            f"| {_pct(level['drawn_when_none'])} | {_pct(level['over_reach'])} "
            f"| {_num(s['latency_p50_s'])} | {_num(s['latency_p95_s'])} "
            f"| {_num(s['warm_latency_p50_s'])} | {_pct(s['prefill_share'])} "
            f"| {s['tokens_per_pass']:.1f} | {s['speedup']:.2f}x | {s['same']}/{s['cases']} "
            f"| {_refusals(s.get('refused', {}))} |"
        )
    lines += ["", "| eagerness | exact | partial | drawn where none needed |", "|---|---|---|---|"]
    for level, figures in summary["all"]["levels"].items():
        lines.append(
            f"| {level} (confidence >= {EAGERNESS[level]}) | {_pct(figures['exact'])} "
            f"| {_pct(figures['partial'])} | {_pct(figures['drawn_when_none'])} |"
        )
    return "\n".join(lines)


def _refusals(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {reason}" for reason, n in sorted(counts.items())) or "-"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def run_edits_mode(args, corpus_dir: Path, per_kind: int, log) -> dict:
    """``--edits``: next-edit cases cut from the corpus (``edits.py``)."""
    languages = names(args.languages, "--languages") or list(DEFAULT_LANGUAGES)
    unknown = [name for name in languages if name not in LANGUAGES]
    if unknown:
        raise BenchError(f"unknown language {unknown[0]!r} (known: {', '.join(LANGUAGES)})")
    cases, short = cut(sources.packages(corpus_dir, set(languages)), languages, per_kind, args.seed)
    for line in short:
        log(f"skipped {line}")
    if not cases:
        raise BenchError("no next-edit cases: no sources for the chosen languages")
    log(f"{len(cases)} next-edit cases in {len({c.language for c in cases})} languages")
    pair = load_pair(args, log, draft_mode="off")  # (edits draft no tokens)
    try:
        result = run_edits(pair, cases, log)
    except ValueError as exc:
        raise BenchError(str(exc)) from None
    return dict(
        command=command_line(),
        machine=dict(cpu=machine.cpu_model(), cpu_kind=machine.cpu_kind()),
        model=pair.model_label,
        backend=pair.quantization,
        settings=dict(seed=args.seed, languages=languages, per_kind=per_kind),
        missing=short,
        **result,
    )
