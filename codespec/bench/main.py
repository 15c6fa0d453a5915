"""`codespec bench`: cut the corpus, run every hole, print the table, write JSON and docs."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from .. import machine
from ..engine.calibration import Calibration
from ..files import FileError, parse_json, read_text
from ..languages import LANGUAGES
from ..memory import return_freed_memory
from ..models.user_models import pair_named
from . import corpus, report, sources
from .docs import bets_text, write_docs
from .peer import peer_lines
from .runner import bench_settings, peak_memory_mb, run_hole

MAX_JSON_BYTES = 256 << 20
# what the docs writer reads of a run's JSON
RESULT_KEYS = ("command", "machine", "model", "settings", "costs", "overall", "memory", "load_s")
RESULT_KEYS += ("corpus", "missing")
# the fixed subset CI runs: its languages, kinds, holes per kind and tokens per completion
QUICK_LANGUAGES, QUICK_KINDS, QUICK_PER_KIND, QUICK_MAX_TOKENS = ("python",), corpus.KINDS, 1, 32


class BenchError(Exception):
    """Bad bench input, reported as one line."""


def choose(args: argparse.Namespace) -> tuple[list[str], list[str], int, int]:
    if args.quick:
        return (
            list(QUICK_LANGUAGES),
            list(QUICK_KINDS),
            QUICK_PER_KIND,
            QUICK_MAX_TOKENS,
        )
    languages = _names(args.languages, "--languages") or list(LANGUAGES)
    kinds = _names(args.kinds, "--kinds") or list(corpus.KINDS)
    for name in languages:
        if name not in LANGUAGES:
            raise BenchError(f"unknown language {name!r} (known: {', '.join(LANGUAGES)})")
    for kind in kinds:
        if kind not in corpus.KINDS:
            raise BenchError(f"unknown hole kind {kind!r} (known: {', '.join(corpus.KINDS)})")
    return languages, kinds, args.per_kind, args.max_tokens


def _names(given: str | None, flag: str) -> list[str]:
    """A comma-separated list from the command line; given but naming nothing is an error
    (``--languages ''`` must not mean every language)."""
    if given is None:
        return []
    names = [name.strip() for name in given.split(",") if name.strip()]
    if not names:
        raise BenchError(f"{flag} names nothing")
    return names


def check_writable(path: Path, flag: str) -> None:
    """Fail before the run, not after it, when an output file cannot be written there."""
    if path.is_dir():
        raise BenchError(f"{flag} {path}: is a directory, not a file")
    folder = path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BenchError(f"{flag} {path}: cannot create its folder ({exc.strerror})") from None
    if not os.access(folder, os.W_OK):
        raise BenchError(f"{flag} {path}: its folder is not writable")


def read_bench_json(path: Path) -> dict:
    """A saved bench run, checked to be one before anything is written from it."""
    try:
        result = parse_json(read_text(path, MAX_JSON_BYTES))
    except (FileError, ValueError) as exc:
        raise BenchError(f"{path}: not a bench JSON ({exc})") from None
    missing = [key for key in RESULT_KEYS if not isinstance(result, dict) or key not in result]
    if missing:
        raise BenchError(f"{path}: not a codespec bench JSON (it has no {', '.join(missing)})")
    return result


def cut_corpus(
    corpus_dir: Path, languages: list[str], kinds: list[str], per_kind: int, seed: int
) -> tuple[list[corpus.Hole], list[sources.Package], list[str]]:
    present = sources.packages(corpus_dir, set(languages))
    holes, missing = [], []
    for language in languages:
        if not any(p.spec.language == language for p in present):
            missing.append(f"{language}: no sources (run `codespec bench --fetch`)")
            continue
        for kind in kinds:
            found = corpus.sample_holes(present, language, kind, per_kind, seed)
            if len(found) < per_kind:
                missing.append(f"{language}/{kind}: {len(found)} of {per_kind} holes found")
            holes += found
    return holes, present, missing


def holes_from(
    recorded: Path, corpus_dir: Path
) -> tuple[list[corpus.Hole], list[sources.Package], list[str]]:
    """The holes of an earlier run's JSON, cut again from the same files."""
    try:
        described = parse_json(read_text(recorded, MAX_JSON_BYTES))["corpus"]["holes"]
    except FileError as exc:
        raise BenchError(str(exc)) from None
    except (ValueError, KeyError, TypeError) as exc:
        raise BenchError(f"{recorded}: not a codespec bench JSON ({exc})") from None
    present = sources.packages(corpus_dir)
    holes, skipped = corpus.recut_available(present, described)
    return holes, present, skipped


def run(args: argparse.Namespace, log=print) -> dict:
    """The whole benchmark; returns the report written to ``--json``."""
    from ..runtime import LoadOptions

    languages, kinds, per_kind, max_tokens = choose(args)
    server = None
    if args.peer:
        from .peer import require

        require()
    if getattr(args, "peer_server", None):
        if not args.peer:
            raise BenchError("--peer-server needs --peer llama.cpp")
        from .peer_server import check_binary

        server = check_binary(args.peer_server)
    corpus_dir = Path(args.corpus_dir) if args.corpus_dir else sources.default_corpus_dir()
    if args.fetch:
        sources.fetch(corpus_dir, log=log)
    if args.holes_from:
        holes, present, missing = holes_from(Path(args.holes_from), corpus_dir)
        languages = sorted({h.language for h in holes})
        kinds = [k for k in corpus.KINDS if any(h.kind == k for h in holes)]
    elif getattr(args, "repo", False):
        return run_repo_mode(args, corpus_dir, languages, per_kind, max_tokens, log)
    elif getattr(args, "edits", False):
        return run_edits_mode(args, corpus_dir, per_kind, log)
    else:
        holes, present, missing = cut_corpus(corpus_dir, languages, kinds, per_kind, args.seed)
    for line in missing:
        log(f"skipped {line}")
    if not holes:
        raise BenchError("no holes: no sources for the chosen languages")
    if getattr(args, "engine", None):
        return run_concurrency(args, holes, max_tokens, missing, log)
    log(f"{len(holes)} holes in {len({h.language for h in holes})} languages; loading the pair")

    t0 = time.perf_counter()
    pair = LoadOptions.from_args(args).load(
        pair_named(args.pair, args.model, draft=args.draft_model), log
    )
    load_s = time.perf_counter() - t0
    memory_after_load = peak_memory_mb()
    log(
        f"{machine.cpu_kind()}: {pair.quantization}; "
        f"prefill {pair.engine.prefill_rate:.0f} tokens/s; "
        f"{rows_text(pair.local.calibration)}"
    )
    settings = bench_settings(max_tokens)
    if args.prompt_seconds is not None:
        settings = replace(settings, prompt_seconds=args.prompt_seconds)
    rows = []
    for i, hole in enumerate(holes):
        row = run_hole(pair, hole, settings, spec_first=i % 2 == 0)
        rows.append(row)
        return_freed_memory()  # as the daemon's worker does when it goes idle
        log(progress_line(i, len(holes), row))

    result = dict(
        command="codespec bench " + " ".join(sys.argv[2:]) if sys.argv[1:2] == ["bench"] else "",
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


def run_repo_mode(args, corpus_dir: Path, languages, per_kind: int, max_tokens: int, log) -> dict:
    """``--repo``: repository holes, in-file context against workspace context (``repo.py``)."""
    from ..runtime import LoadOptions
    from .repo import run_repo

    present = sources.packages(corpus_dir, set(languages))
    pair = LoadOptions.from_args(args).load(
        pair_named(args.pair, args.model, draft=args.draft_model), log
    )
    settings = bench_settings(max_tokens)
    if args.prompt_seconds is not None:
        settings = replace(settings, prompt_seconds=args.prompt_seconds)
    log(f"{machine.cpu_kind()}: prefill {pair.engine.prefill_rate:.0f} tokens/s")
    lines = args.repo_lines
    result = run_repo(pair, present, languages, per_kind, args.seed, settings, log=log, lines=lines)
    return dict(
        command="codespec bench " + " ".join(sys.argv[2:]) if sys.argv[1:2] == ["bench"] else "",
        machine=dict(cpu=machine.cpu_model(), cpu_kind=machine.cpu_kind()),
        model=pair.model_label,
        settings=dict(
            seed=args.seed,
            languages=languages,
            per_language=per_kind,
            lines=lines,
            max_tokens=max_tokens,
            prompt_seconds=settings.prompt_seconds,
            prefill_tokens_per_s=pair.engine.prefill_rate,
        ),
        **result,
    )


def run_edits_mode(args, corpus_dir: Path, per_kind: int, log) -> dict:
    """``--edits``: next-edit cases cut from the corpus (``edits.py``)."""
    from ..runtime import LoadOptions
    from .edit_cases import DEFAULT_LANGUAGES, cut
    from .edits import run_edits

    languages = _names(args.languages, "--languages") or list(DEFAULT_LANGUAGES)
    unknown = [name for name in languages if name not in LANGUAGES]
    if unknown:
        raise BenchError(f"unknown language {unknown[0]!r} (known: {', '.join(LANGUAGES)})")
    cases, short = cut(sources.packages(corpus_dir, set(languages)), languages, per_kind, args.seed)
    for line in short:
        log(f"skipped {line}")
    if not cases:
        raise BenchError("no next-edit cases: no sources for the chosen languages")
    log(f"{len(cases)} next-edit cases in {len({c.language for c in cases})} languages")
    options = replace(LoadOptions.from_args(args), draft_mode="off")  # (edits draft no tokens)
    pair = options.load(pair_named(args.pair, args.model, draft=args.draft_model), log)
    try:
        result = run_edits(pair, cases, log)
    except ValueError as exc:
        raise BenchError(str(exc)) from None
    return dict(
        command="codespec bench " + " ".join(sys.argv[2:]) if sys.argv[1:2] == ["bench"] else "",
        machine=dict(cpu=machine.cpu_model(), cpu_kind=machine.cpu_kind()),
        model=pair.model_label,
        backend=pair.quantization,
        settings=dict(seed=args.seed, languages=languages, per_kind=per_kind),
        missing=short,
        **result,
    )


def run_concurrency(args, holes, max_tokens: int, missing: list[str], log) -> dict:
    """``--engine``: the holes as concurrent editors against serving engines
    (``concurrency.py``); nothing runs locally but the tokenizer and the stop rules."""
    from ..remote.config import EngineConfigError
    from .concurrency import parse_engines, parse_levels, run_engines

    try:
        engines = parse_engines(args.engine)
        levels = parse_levels(args.concurrency)
    except (EngineConfigError, ValueError) as exc:
        raise BenchError(str(exc)) from None
    log(f"{len(holes)} holes as {', '.join(map(str, levels))} concurrent editors")
    settings = bench_settings(max_tokens, prompt_seconds=0.0)
    if args.window_tokens:
        prefix, _, suffix = args.window_tokens.partition(",")
        if not (prefix.isdigit() and suffix.isdigit() and int(prefix) >= 16):
            raise BenchError("--window-tokens wants PREFIX,SUFFIX in tokens, like 256,64")
        settings = replace(settings, prefix_tokens=int(prefix), suffix_tokens=int(suffix))
    result = run_engines(args.pair, engines, holes, levels, settings, log=log)
    command = "codespec bench " + " ".join(sys.argv[2:]) if sys.argv[1:2] == ["bench"] else ""
    return dict(
        command=command,
        machine=dict(cpu=machine.cpu_model(), cpu_kind=machine.cpu_kind()),
        concurrency=result,
        missing=missing,
        settings=dict(
            seed=args.seed,
            max_tokens=max_tokens,
            holes=len(holes),
            prefix_tokens=settings.prefix_tokens,
            suffix_tokens=settings.suffix_tokens,
        ),
    )


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


def main(args: argparse.Namespace) -> int:
    try:
        if args.json:
            check_writable(Path(args.json), "--json")
        if args.write_docs or args.docs_from:
            check_writable(Path(args.docs), "--docs")
        if args.docs_from:
            docs_from(Path(args.docs_from), Path(args.docs))
            print(f"wrote {args.docs}")
            return 0
        with background_load(getattr(args, "background_load", 0)):
            result = run(args, log=lambda m: print(m, file=sys.stderr, flush=True))
    except BenchError as exc:
        print(f"codespec: error: {exc}", file=sys.stderr)
        return 2
    if "rows" in result and "summary" in result:  # --edits
        from .edits import table as edits_table

        print(edits_table(result["summary"]))
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=1))
            print(f"wrote {args.json}")
        return 0
    if "concurrency" in result or "summary" in result:  # --engine, --repo
        if "summary" in result:
            from .repo import table
        else:
            from .concurrency import table

        print(table(result.get("summary") or result["concurrency"]))
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=1))
            print(f"wrote {args.json}")
        return 0
    print(report.table(result))
    print(bets_text(result).removeprefix("- "))
    if result.get("threads"):
        print(report.threads_text(result["threads"]))
    if "peer" in result:
        print(peer_table(result["peer"], result["machine"].get("quantization", "")))
    if result["missing"]:
        print("skipped: " + "; ".join(result["missing"]))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=1))
        print(f"wrote {args.json}")
    if args.write_docs:
        write_docs(result, Path(args.docs))
        print(f"wrote {args.docs}")
    return 0


@contextlib.contextmanager
def background_load(processes: int) -> Iterator[None]:
    """While inside: ``processes`` CPU-bound processes run beside the measurement (a user's
    build or language server), each keeping one core busy."""
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(processes)]
    try:
        yield
    finally:
        for process in busy:
            process.kill()
            process.wait()


def docs_from(saved: Path, docs: Path) -> None:
    result = read_bench_json(saved)
    try:
        write_docs(result, docs)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        raise BenchError(f"{saved}: not a complete codespec bench JSON ({exc!r})") from None


def peer_table(peer: dict, weights: str = "") -> str:
    return "\n".join(peer_lines(peer, weights))
