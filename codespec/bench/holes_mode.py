"""The default `codespec bench` mode: every hole completed plainly and speculatively on the
local pair (``runner.py``), the rows summarized (``report.py``), llama.cpp beside it on request
(``--peer``)."""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

from .. import machine
from ..engine.calibration import Calibration
from ..memory import return_freed_memory
from . import corpus, report, sources
from .inputs import command_line, load_pair, settings_for
from .runner import peak_memory_mb, run_hole


def run_holes(
    args: argparse.Namespace,
    holes: list[corpus.Hole],
    present: list[sources.Package],
    missing: list[str],
    chosen: tuple[list[str], list[str], int, int],
    server,
    log,
) -> dict:
    """The report of the holes run on the local pair (``chosen``: languages, kinds, holes per
    kind, tokens per completion; ``server``: a llama-server binary to compare with)."""
    languages, kinds, per_kind, max_tokens = chosen
    log(f"{len(holes)} holes in {len({h.language for h in holes})} languages; loading the pair")

    t0 = time.perf_counter()
    pair = load_pair(args, log)
    load_s = time.perf_counter() - t0
    memory_after_load = peak_memory_mb()
    log(
        f"{machine.cpu_kind()}: {pair.quantization}; "
        f"prefill {pair.engine.prefill_rate:.0f} tokens/s; "
        f"{rows_text(pair.local.calibration)}"
    )
    settings = settings_for(args, max_tokens)
    rows = []
    for i, hole in enumerate(holes):
        row = run_hole(pair, hole, settings, spec_first=i % 2 == 0)
        rows.append(row)
        return_freed_memory()  # as the daemon's worker does when it goes idle
        log(progress_line(i, len(holes), row))

    result = dict(
        command=command_line(),
        machine=dict(
            cpu=machine.cpu_model(),
            cpu_kind=machine.cpu_kind(),
            device=pair.device,
            dtype=pair.dtype,
            quantization=pair.quantization,
            exact_rows=pair.local.calibration.exact,
            one_row_exact=not pair.local.calibration.pad_single_row,
            prefill_tokens_per_s=pair.engine.prefill_rate,
            python=platform.python_version(),
            torch=machine.package_version("torch"),
            threads=pair.local.max_threads,
        ),
        model=pair.model_label,
        load_s=load_s,
        settings=dict(
            seed=args.seed,
            quick=args.quick,
            languages=languages,
            kinds=kinds,
            per_kind=per_kind,
            max_tokens=max_tokens,
            prefix_tokens=settings.prefix_tokens,
            suffix_tokens=settings.suffix_tokens,
            prompt_seconds=settings.prompt_seconds,
            draft=args.draft,
            background_load=getattr(args, "background_load", 0),
            backend=pair.backend,
        ),
        memory=dict(after_load=memory_after_load, peak=peak_memory_mb()),
        costs=pass_costs(pair),
        **report.summarize(rows),
        missing=missing,
        corpus=dict(
            sources=[
                dict(label=p.label, language=p.spec.language, under=p.spec.under) for p in present
            ],
            holes=[h.describe() for h in holes],
        ),
        holes=rows,
    )
    if args.peer:
        from .peer import run_peer

        result["peer"] = run_peer(
            pair, holes, rows, settings, log=log, limit=args.peer_holes, server=server
        )
    return result


def rows_text(calibration: Calibration) -> str:
    """What the verifier promises on this run: bit-exact rows, or each width's fastest kernel."""
    if not calibration.exact:
        return "rows: each pass width's fastest kernel (a near-tie may round either way)"
    return f"rows: exact (one-row passes exact alone: {not calibration.pad_single_row})"


def progress_line(i: int, n: int, row: dict) -> str:
    h, spec, plain = row["hole"], row["spec"], row["plain"]
    rate = report.rate
    return (
        f"[{i + 1}/{n}] {h['language']:<15} {h['kind']:<8} {Path(h['file']).name[:24]:<24} "
        f"plain {rate(plain):5.1f} tok/s  spec {rate(spec):5.1f} tok/s "
        f"{spec['tokens'] / spec['passes']:4.2f} tok/pass  exact={row['exact']!s:5} "
        f"match={row['exact_match']!s:5} sim={row['edit_similarity']:.2f} "
        f"parses={row['parse_ok']!s:5} ttft {row['ttft_ms']:.0f}/{row['cold_ttft_ms']:.0f} ms"
    )


def pass_costs(pair) -> dict:
    """Seconds per target pass by width and per draft step, as the policy measured them."""
    policy = pair.engine.policy
    widths = {w: e.value for w, e in policy.costs.pass_s.items() if e.value is not None}
    draft = policy.costs.draft_step_s.value
    return dict(
        target_pass_s=widths,
        draft_step_s=draft,
        draft_cost_ratio=draft / widths[1] if draft and widths.get(1) else None,
        decisions=dict(policy.decisions),
    )
