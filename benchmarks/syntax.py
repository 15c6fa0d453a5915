"""Syntax-rule benchmark: per language, do completions leave the file parseable, and how many
tokens and target passes do the stop rules save?

Holes are cut from real source files found on this machine (code nobody here wrote), from files
that parse cleanly: the cursor goes after the indentation of a random code line and the rest of
that line is removed. Each hole is completed twice on the same engine and warm cache: with the
syntax-aware rules (mode decided at the cursor, stops inside the decode loop, shaping) and
without them (stop only at end-of-text or the token limit).

    .venv/bin/python benchmarks/syntax.py [--per-language 6] [--json bench-out/syntax.json]

Sources: the corpus of `codespec bench` (the Python standard library, plus the npm and Debian
packages `codespec bench --fetch` downloads); languages without any are reported as such.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
from pathlib import Path

from codespec.bench import sources
from codespec.completion import CompletionOptions, complete
from codespec.languages import LANGUAGES, has_syntax_error
from codespec.runtime import load_pair
from codespec.stops import Cursor, Mode

ROOT = Path(__file__).resolve().parent.parent


def find_sources(language: str, corpus_dir: Path) -> list[Path]:
    """Source files of ``language`` in the bench corpus (``codespec bench --fetch``)."""
    found = sources.packages(corpus_dir, {language})
    return [f for package in found for f in sources.source_files(package)]


def cut_hole(text: str, language, rng: random.Random) -> tuple[str, str] | None:
    lines = text.splitlines(keepends=True)
    spots = [
        i
        for i, line in enumerate(lines)
        if 10 < i < len(lines) - 3
        and len(line.strip()) > 8
        and not line.strip().startswith((language.line_comment, "*", "/*"))
    ]
    if not spots:
        return None
    i = rng.choice(spots)
    indent = len(lines[i]) - len(lines[i].lstrip())
    prefix = "".join(lines[:i]) + lines[i][:indent]
    suffix = "\n" + "".join(lines[i + 1 :])
    return prefix, suffix


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-language", type=int, default=6)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--corpus-dir", default=str(sources.default_corpus_dir()))
    ap.add_argument("--json", default=str(ROOT / "bench-out" / "syntax.json"))
    args = ap.parse_args()
    pair = load_pair(progress=lambda m: print(m, flush=True))
    rng = random.Random(args.seed)
    report: dict = {"by_language": {}, "missing": []}
    for name, language in LANGUAGES.items():
        files = find_sources(name, Path(args.corpus_dir))
        rng.shuffle(files)
        rows = []
        for path in files:
            if len(rows) >= args.per_language:
                break
            text = path.read_text(errors="replace")
            if has_syntax_error(language, text) is not False:
                continue  # only files that parse: a completion's parse result is then its own
            hole = cut_hole(text, language, rng)
            if hole is None:
                continue
            cursor = Cursor(*hole, language)
            row = {"file": str(path)}
            # Prefill once, so both runs below start from the same warm cache (and the same
            # bf16 numerics: a cold chunked prefill rounds differently from a cached one).
            warm = CompletionOptions(
                max_tokens=1,
                line_max_tokens=1,
                stop_rules=False,
                mode=Mode.BLOCK,
                prefix_tokens=384,
                suffix_tokens=128,
            )
            complete(pair, cursor, warm, path=path.name)
            for rules in (True, False):
                options = CompletionOptions(
                    max_tokens=args.max_tokens,
                    line_max_tokens=args.max_tokens,
                    stop_rules=rules,
                    mode=None if rules else Mode.BLOCK,
                    prefix_tokens=384,
                    suffix_tokens=128,
                )
                result = complete(pair, cursor, options, path=path.name)
                stats = result.stats
                key = "rules" if rules else "free"
                row[key] = {
                    "mode": result.mode.value,
                    "tokens": stats.tokens if stats else 0,
                    "passes": (stats.target_passes + 1) if stats else 0,
                    "parse_ok": has_syntax_error(language, hole[0] + result.text + hole[1])
                    is False,
                    "chars": len(result.text),
                }
            rows.append(row)
            r, f = row["rules"], row["free"]
            print(
                f"{name:16} {path.name[:28]:28} mode {r['mode']:5} rules: {r['tokens']:3} tok "
                f"{r['passes']:3} passes parse={r['parse_ok']!s:5} | free: {f['tokens']:3} tok "
                f"{f['passes']:3} passes parse={f['parse_ok']}",
                flush=True,
            )
        if not rows:
            report["missing"].append(name)
            print(f"{name:16} no parseable source files found", flush=True)
            continue
        ran = [r for r in rows if r["rules"]["mode"] != "none"]
        report["by_language"][name] = {
            "holes": len(rows),
            "completed": len(ran),
            "parse_ok": sum(r["rules"]["parse_ok"] for r in ran) / max(len(ran), 1),
            "parse_ok_without_rules": sum(r["free"]["parse_ok"] for r in rows) / max(len(rows), 1),
            "tokens_with_rules": statistics.mean(r["rules"]["tokens"] for r in rows),
            "tokens_without_rules": statistics.mean(r["free"]["tokens"] for r in rows),
            "passes_with_rules": sum(r["rules"]["passes"] for r in rows),
            "passes_without_rules": sum(r["free"]["passes"] for r in rows),
            "rows": rows,
        }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(report, indent=1))
    print(
        f"\n{'language':16} holes  parse-ok(rules)  parse-ok(free)  tokens rules/free  "
        "passes rules/free"
    )
    for name, r in report["by_language"].items():
        print(
            f"{name:16} {r['holes']:5}  {100 * r['parse_ok']:14.0f}%  "
            f"{100 * r['parse_ok_without_rules']:13.0f}%  "
            f"{r['tokens_with_rules']:7.1f} / {r['tokens_without_rules']:5.1f}  "
            f"{r['passes_with_rules']:7} / {r['passes_without_rules']}"
        )
    print("no source found for:", ", ".join(report["missing"]) or "-")


if __name__ == "__main__":
    main()
