"""How long the workspace index takes to build for a folder, and the memory it holds.

    .venv/bin/python benchmarks/workspace_index.py FOLDER [--drafter]

Prints files indexed, text read, definitions, seconds and the RSS the index added, freed heap
returned (``docs/workspace.md``, "Cost"). With
``--drafter`` the files are tokenized too, with the default pair's tokenizer, for the workspace
drafter: it also prints the tokens kept, the corpus's memory, one rebuild's time and a
lookup's. Run it alone: on 2 cores another process distorts both.
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from pathlib import Path

from codespec.memory import return_freed_memory
from codespec.workspace.index import WorkspaceIndex
from codespec.workspace.symbols import definitions


def rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096 / 1e6


def default_tokenizer():
    """The default pair's tokenizer (its files only: no model is loaded)."""
    from transformers import AutoTokenizer

    from codespec.models import load_manifest, resolve_source

    default = load_manifest()
    folder = resolve_source(  # the prepared form the daemon uses (the same tokenizer files)
        default.target, default.install_hint, progress=lambda m: None, form="quantized"
    )
    tokenizer = AutoTokenizer.from_pretrained(folder)
    return lambda text: tokenizer.encode(text, add_special_tokens=False)


def drafter_figures(index: WorkspaceIndex) -> str:
    corpus = index.corpus
    started = time.perf_counter()
    corpus.refresh()
    rebuild = time.perf_counter() - started
    rng = random.Random(1)
    segments = [s for s in corpus.segments.values() if len(s) > 40]
    times = []
    for _ in range(300):  # contexts that end inside the corpus's own text: hits to extend
        segment = rng.choice(segments)
        end = rng.randrange(32, len(segment) - 8)
        context = [int(t) for t in segment[end - 32 : end]]
        started = time.perf_counter()
        corpus.lookup(context, span=16, branches=3)
        times.append(time.perf_counter() - started)
    return (
        f"drafter: {corpus.total} tokens, corpus {corpus.memory_bytes() / 1e6:.0f} MB, "
        f"rebuild {rebuild:.2f} s, lookup p50 {1e3 * statistics.median(times):.2f} ms "
        f"p99 {1e3 * sorted(times)[int(0.99 * len(times))]:.2f} ms"
    )


def main() -> None:
    folder = Path(sys.argv[1])
    drafter = "--drafter" in sys.argv[2:]
    # the grammars, queries and tokenizer loaded (either way: the same baseline) and the heap
    # trimmed before the baseline, so that the growth is the index's
    tokenizer = default_tokenizer()
    tokenizer("def f(): pass\n")
    definitions("python", "def f(): pass\n")
    tokenize = tokenizer if drafter else None
    return_freed_memory(collect=True)
    base = rss_mb()
    started = time.perf_counter()
    index = WorkspaceIndex(folder, tokenize=tokenize)
    index.build()
    seconds = time.perf_counter() - started
    return_freed_memory(collect=True)
    count = sum(len(f.definitions) for f in index.files.values())
    print(
        f"{folder}: {len(index.files)} files, {index.text_bytes() / 1e6:.1f} MB read, "
        f"{count} definitions, {seconds:.1f} s, RSS +{rss_mb() - base:.0f} MB"
    )
    if drafter:
        print(drafter_figures(index))


if __name__ == "__main__":
    main()
