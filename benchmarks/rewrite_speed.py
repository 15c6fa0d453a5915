"""Next edits on the embedded pair, written plain and with speculative edits, side by side on the
same windows (``nextedit/suggest.py``: the prompt, the window as its own draft, the stops, the
edits worth showing).

Cases are cut from a real file: a local name renamed at its first assignment (``name`` to
``name_value``), its later uses in the window still to follow; the window around that line in
Sweep's prompt format with the rename as the recent edit. Each case runs plain (one token a
pass) and speculative (the rewrite proposer; prompt lookup on, the draft off), one after the
other, the prompt prefilled before each so that generation alone is timed. "exact" means the
edits shown turn the window into the expected one (every later use renamed, nothing else).

    .venv/bin/python benchmarks/rewrite_speed.py [--cases 8] [--file PATH] [--backend ggml]
"""

from __future__ import annotations

import argparse
import re
import statistics
import sysconfig
import time
from pathlib import Path

from codespec.machine import cpu_kind
from codespec.nextedit import prompt as nes
from codespec.nextedit.edits import LineEdit
from codespec.nextedit.history import EditHistory
from codespec.nextedit.suggest import suggest
from codespec.runtime import load_pair

ASSIGNED = re.compile(r"^(\s+)([a-z_][a-z0-9_]{2,})\s*=[^=]")
SUFFIX = "_value"


def rename_cases(text: str, count: int) -> list[tuple[str, int, EditHistory, str]]:
    """(the text after the rename's first edit, the edited line, its history, the window as it
    should become) for names assigned in a function and used again within the window."""
    lines = text.splitlines(keepends=True)
    cases = []
    for i, line in enumerate(lines):
        match = ASSIGNED.match(line)
        if not match:
            continue
        name = match.group(2)
        use = re.compile(rf"\b{name}\b")
        if not use.search("".join(lines[i + 1 : i + 1 + nes.WINDOW_RADIUS])):
            continue
        history = EditHistory.opened(text)
        start = sum(map(len, lines[:i])) + match.start(2)
        history.record(text, start, name, name + SUFFIX, now=0.0)
        edited = text[:start] + name + SUFFIX + text[start + len(name) :]
        window = nes.window_around(edited, i)
        wanted = window.text.splitlines(keepends=True)
        for k in range(i + 1 - window.first, len(wanted)):
            wanted[k] = use.sub(name + SUFFIX, wanted[k])
        cases.append((edited, i, history, "".join(wanted)))
        if len(cases) >= count:
            break
    return cases


def applied(window: str, edits: list[LineEdit]) -> str:
    lines = window.splitlines(keepends=True)
    for edit in sorted(edits, key=lambda e: -e.first):
        lines[edit.first : edit.end] = edit.new.splitlines(keepends=True)
    return "".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=8)
    ap.add_argument("--file", default=str(Path(sysconfig.get_paths()["stdlib"]) / "textwrap.py"))
    ap.add_argument("--backend", default="ggml")
    args = ap.parse_args()
    pair = load_pair(backend=args.backend, use_draft=False, progress=lambda _: None)
    separator = pair.manifest.tokens.file_sep or "<|file_sep|>"
    text = Path(args.file).read_text()
    print(f"{cpu_kind()}; {pair.quantization}; {Path(args.file).name}")
    print(
        "| line | tokens written | plain s | speculative s | speedup | tokens/pass | same | exact |"
    )
    print("|---|---|---|---|---|---|---|---|")
    speedups, exact, same = [], 0, 0
    cases = rename_cases(text, args.cases)
    for edited, line, history, wanted in cases:
        runs = []
        for speculate in (False, True):
            t0 = time.perf_counter()
            result = suggest(
                pair.engine, pair.tokenizer, separator, Path(args.file).name, edited, line,
                history, speculate=speculate,
            )  # fmt: skip
            runs.append((result, time.perf_counter() - t0 - result.stats.prefill_s))
        (plain, plain_s), (fast, fast_s) = runs
        speedups.append(plain_s / fast_s)
        same += plain.updated == fast.updated
        hit = applied(fast.window.text, fast.edits) == wanted
        exact += hit
        per_pass = fast.stats.tokens / max(fast.stats.target_passes + 1, 1)
        print(
            f"| {line + 1} | {fast.stats.tokens} | {plain_s:.2f} | {fast_s:.2f} "
            f"| {plain_s / fast_s:.2f}x | {per_pass:.1f} | {plain.updated == fast.updated} "
            f"| {hit} |"
        )
    n = len(cases)
    print(
        f"median speedup {statistics.median(speedups):.2f}x; the same text {same} of {n}; "
        f"exact {exact} of {n}"
    )


if __name__ == "__main__":
    main()
