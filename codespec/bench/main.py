"""`codespec bench`: cut the corpus, run every hole, print the table, write JSON and docs."""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from dataclasses import replace
from pathlib import Path

from ..files import FileError, read_text
from ..languages import LANGUAGES
from ..memory import return_freed_memory
from . import corpus, report, sources
from .runner import BenchSettings, peak_memory_mb, run_hole

MAX_JSON_BYTES = 256 << 20
QUICK = dict(languages=("python",), kinds=corpus.KINDS, per_kind=1, max_tokens=32)


class BenchError(Exception):
    """Bad bench input, reported as one line."""


def choose(args: argparse.Namespace) -> tuple[list[str], list[str], int, int]:
    seconds = getattr(args, "prompt_seconds", None)
    if seconds is not None and not 0 <= seconds <= 600:
        raise BenchError("--prompt-seconds must be between 0 and 600")
    if args.quick:
        return (
            list(QUICK["languages"]),
            list(QUICK["kinds"]),
            QUICK["per_kind"],
            QUICK["max_tokens"],
        )
    languages = args.languages.split(",") if args.languages else list(LANGUAGES)
    kinds = args.kinds.split(",") if args.kinds else list(corpus.KINDS)
    for name in languages:
        if name not in LANGUAGES:
            raise BenchError(f"unknown language {name!r} (known: {', '.join(LANGUAGES)})")
    for kind in kinds:
        if kind not in corpus.KINDS:
            raise BenchError(f"unknown hole kind {kind!r} (known: {', '.join(corpus.KINDS)})")
    if args.per_kind < 1 or args.max_tokens < 1:
        raise BenchError("--per-kind and --max-tokens must be at least 1")

    return languages, kinds, args.per_kind, args.max_tokens


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
        described = json.loads(read_text(recorded, MAX_JSON_BYTES))["corpus"]["holes"]
    except FileError as exc:
        raise BenchError(str(exc)) from None
    except (ValueError, KeyError, TypeError) as exc:
        raise BenchError(f"{recorded}: not a codespec bench JSON ({exc})") from None
    present = sources.packages(corpus_dir)
    holes, skipped = corpus.recut_available(present, described)
    return holes, present, skipped


def run(args: argparse.Namespace, log=print) -> dict:
    """The whole benchmark; returns the report written to ``--json``."""
    import torch

    from ..runtime import load_pair

    languages, kinds, per_kind, max_tokens = choose(args)
    if args.peer:
        from .peer import require

        require()
    corpus_dir = Path(args.corpus_dir) if args.corpus_dir else sources.default_corpus_dir()
    if args.fetch:
        sources.fetch(corpus_dir, log=log)
    if args.holes_from:
        holes, present, missing = holes_from(Path(args.holes_from), corpus_dir)
        languages = sorted({h.language for h in holes})
        kinds = [k for k in corpus.KINDS if any(h.kind == k for h in holes)]
    else:
        holes, present, missing = cut_corpus(corpus_dir, languages, kinds, per_kind, args.seed)
    for line in missing:
        log(f"skipped {line}")
    if not holes:
        raise BenchError("no holes: no sources for the chosen languages")
    log(f"{len(holes)} holes in {len({h.language for h in holes})} languages; loading the pair")

    t0 = time.perf_counter()
    pair = load_pair(
        args.pair, device=args.device, draft_mode=args.draft, progress=log, quantize=args.quantize
    )
    load_s = time.perf_counter() - t0
    memory_after_load = peak_memory_mb()
    log(
        f"{cpu_kind()}: {pair.quantization}; prefill {pair.engine.prefill_rate:.0f} tokens/s; "
        f"one-row passes exact: {not pair.engine.pad_single_row}"
    )
    settings = BenchSettings(max_tokens=max_tokens)
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
            cpu=cpu_model(),
            cpu_kind=cpu_kind(),
            device=pair.device,
            dtype=pair.dtype,
            quantization=pair.quantization,
            one_row_exact=not pair.engine.pad_single_row,
            prefill_tokens_per_s=pair.engine.prefill_rate,
            python=platform.python_version(),
            torch=torch.__version__,
            threads=torch.get_num_threads(),
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

        result["peer"] = run_peer(pair, holes, rows, settings, log=log, limit=args.peer_holes)
    return result


def sample_text(result: dict) -> str:
    settings = result["settings"]
    if "--holes-from" in (result.get("command") or ""):
        return f"{len(result['corpus']['holes'])} holes recut from a saved run's corpus"
    return f"Seed {settings['seed']}, {settings['per_kind']} hole(s) per language and kind"


def window_text(settings: dict) -> str:
    limits = f"{settings['prefix_tokens']} / {settings['suffix_tokens']} tokens"
    seconds = settings.get("prompt_seconds") or 0
    if not seconds:
        return f"{limits} (fixed)"
    return f"sized to a {seconds:g} s cold prefill within {limits} (the daemon's default)"


def cpu_model() -> str:
    for line in _cpuinfo().splitlines():
        if line.startswith("model name") and ":" in line:
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def cpu_kind() -> str:
    """Which kind of x86 CPU the figures come from: it decides which kernels are fast."""
    flags = set(_cpuinfo().split())
    if "avx512_bf16" in flags or "amx_bf16" in flags:
        return "AVX-512 with bf16"
    if "avx512f" in flags:
        return "AVX-512 (no bf16)"
    return "AVX2 (no AVX-512)" if "avx2" in flags else platform.machine()


def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


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


def priced_text(result: dict) -> str:
    """The docs line saying what ``priced`` means, with this run's pass prices."""
    prices = result.get("pass_prices_ms")
    if not prices:
        return "- priced: not measured (this run's JSON does not keep each hole's passes)."
    return (
        "- priced: the same ratio with every decode pass of both runs at the median time of all "
        "passes of its width in this run (ms: "
        + ", ".join(f"{w}: {ms:.0f}" for w, ms in prices.items())
        + "): what the policy chose (how many passes, how wide), without the machine's timing "
        f"noise; a hole's measured speedup strays from its priced one by "
        f"{report.fmt(result.get('timing_noise'), '{:.0%}')} (median)."
    )


def below_one_text(below: dict | None) -> str:
    """The docs line naming the slices under 1.0x, measured and priced (with what the priced
    ones' bets kept, where the run's JSON has them)."""
    if below is None:
        return "- Slices below 1.0x: not recorded in this run's JSON."
    measured = ", ".join(below["speedup"]) or "none"
    priced = ", ".join(below["priced_speedup"]) or "none"
    bets = "; ".join(below.get("priced_bets", []))
    bets = f" (their bets: {bets})" if bets else ""
    return f"- Language x kind slices below 1.0x: measured {measured}; priced {priced}{bets}."


def bets_text(result: dict) -> str:
    """The docs line on the policy's bets: all of them against what was expected, and how
    often a first token was kept by its predicted rate."""
    calibration = result.get("bet_calibration")
    if not calibration:
        return "- The policy's bets: not recorded in this run's JSON."
    bets = result["overall"]["bets"]
    return (
        f"- The policy's bets (passes that verified proposed tokens): {report.bet_text(bets)}, "
        "bonus tokens not counted; first token kept, predicted -> measured, by predicted "
        f"rate: {report.calibration_text(calibration)}."
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
    if args.docs_from:
        try:
            result = json.loads(read_text(args.docs_from, MAX_JSON_BYTES))
        except (FileError, ValueError) as exc:
            print(f"codespec: error: {args.docs_from}: not a bench JSON ({exc})", file=sys.stderr)
            return 2
        write_docs(result, Path(args.docs))
        print(f"wrote {args.docs}")
        return 0
    try:
        result = run(args, log=lambda m: print(m, file=sys.stderr, flush=True))
    except BenchError as exc:
        print(f"codespec: error: {exc}", file=sys.stderr)
        return 2
    print(report.table(result))
    print(bets_text(result).removeprefix("- "))
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


def peer_table(peer: dict, weights: str = "") -> str:
    from .peer import peer_lines

    return "\n".join(peer_lines(peer, weights))


def write_docs(result: dict, docs: Path) -> None:
    """Regenerate the bench section of docs/benchmarks.md and its plots."""
    s = result["overall"]
    try:
        pngs = report.plot(result, docs.parent / "img")
        images = [f"![{p.stem}](img/{p.name})" for p in pngs]
    except ImportError:
        images = ["(plots skipped: matplotlib is not installed)"]
    settings, costs = result["settings"], result["costs"]
    passes = sorted(costs["target_pass_s"].items(), key=lambda item: int(item[0]))
    widths = ", ".join(f"{w}: {v:.3f}" for w, v in passes)
    lines = [
        "<!-- bench:start (regenerated by `codespec bench --write-docs`) -->",
        f"Generated by `{result['command'] or 'codespec bench'}`; figures from one run.",
        "",
        f"Machine: {result['machine']['cpu']}, {result['machine']['threads']} threads, "
        f"{result['machine']['device']} / {result['machine']['dtype']}, torch "
        f"{result['machine']['torch']}. Model: {result['model']}. {sample_text(result)}, at most "
        f"{settings['max_tokens']} new tokens, prompt windows {window_text(settings)}, stop "
        f"rules on. CPU kind: {result['machine'].get('cpu_kind', '?')}; weights: "
        f"{result['machine'].get('quantization', '?')}.",
        "",
        *report.markdown_table(result),
        "",
        "- speedup: speculative tokens/s over plain tokens/s, both greedy on the same engine and "
        "warm cache, measured side by side (aggregate over the slice's tokens); exact: share of "
        "holes where the speculative output is token-identical to plain greedy.",
        priced_text(result),
        below_one_text(result.get("slices_below_one")),
        bets_text(result),
        "- ttft: a keystroke at the cursor (the cached prompt is extended); cold ttft: the first "
        "request at a new place (full prefill); total: the whole speculative completion with "
        "the prompt cached.",
        "- exact-match / edit-sim (normalized Levenshtein similarity) compare the completion with "
        "the removed text; parses: the file parses after inserting the completion.",
        f"- Overall: speedup median {report.fmt(s.get('speedup_median'), '{:.2f}x')}; proposed / "
        f"accepted tokens: n-gram {s['proposed']['ngram']} / {s['accepted']['ngram']}, draft "
        f"{s['proposed']['draft']} / {s['accepted']['draft']}; passes with the draft running: "
        f"{s['draft_passes']}; policy decisions {s['draft_decisions']}.",
        f"- Target pass cost by width, the policy's running averages at the end (s; noisy on a "
        f"shared machine): {widths}; draft step / one-token pass: "
        f"{report.fmt(costs['draft_cost_ratio'], '{:.2f}')}.",
        memory_text(result["memory"], result["load_s"]),
        "- Mismatches between speculative and plain greedy: "
        + (", ".join(s["mismatches"]) or "none")
        + ". Row-wise attention and row-wise kernels (int4/int8; dense GEMMs get a padding "
        "row where a one-row pass rounds differently) make a position's logits independent of "
        "the pass width (`codespec/engine/attention.py`): any mismatch is a bug; the gap shown "
        "is the target's top-2 logit gap where it starts.",
        "",
        *images,
        "",
    ]
    if "peer" in result:
        from .peer import peer_lines

        weights = result["machine"].get("quantization", "")
        lines += [
            "### Peer: llama.cpp on the same holes",
            "",
            *peer_lines(result["peer"], weights),
            "",
        ]
    lines += [
        f"Corpus: {len(result['corpus']['holes'])} holes from "
        + ", ".join(sorted({src["label"] for src in result["corpus"]["sources"]}))
        + "; every hole's package, file, sha256 and offsets are in the JSON (`corpus.holes`).",
        *(["Skipped: " + "; ".join(result["missing"]) + "."] if result["missing"] else []),
        "<!-- bench:end -->",
    ]
    replace_section(docs, "bench", "\n".join(lines))


def memory_text(memory: dict, load_s: float) -> str:
    """The docs' memory line. The peak is the process's highest resident size: it is said to
    be during loading only where it was already reached when loading ended."""
    after, peak = memory["after_load"], memory["peak"]
    when = "during loading" if peak["rss_mb"] <= after["rss_mb"] else "after loading"
    return (
        f"- Memory: RSS {report.fmt(after.get('rss_now_mb'), '{:.0f}')} MB after loading, "
        f"{report.fmt(peak.get('rss_now_mb'), '{:.0f}')} MB at the end, peak "
        f"{peak['rss_mb']:.0f} MB ({when}); loading the prepared pair {load_s:.1f} s."
    )


def replace_section(path: Path, name: str, text: str) -> None:
    """Put ``text`` between the ``name`` markers of ``path``, keeping the rest of the file."""
    old = path.read_text() if path.exists() else "# Benchmarks\n\n"
    start, end = f"<!-- {name}:start", f"<!-- {name}:end -->"
    if start in old and end in old:
        head, rest = old.split(start, 1)
        tail = rest.split(end, 1)[1]
        path.write_text(head + text + tail)
    else:
        path.write_text(old.rstrip("\n") + "\n\n" + text + "\n")
