"""How long the workspace index takes to build for a folder, and the memory it holds.

    .venv/bin/python benchmarks/workspace_index.py FOLDER

Prints files indexed, text read, definitions, seconds and the RSS the index added
(``docs/workspace.md``, "Cost"). Run it alone: on 2 cores another process distorts both.
"""

from __future__ import annotations

import gc
import sys
import time
from pathlib import Path

from codespec.workspace.index import WorkspaceIndex
from codespec.workspace.symbols import definitions


def rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096 / 1e6


def main() -> None:
    folder = Path(sys.argv[1])
    definitions("python", "def f(): pass\n")  # grammars and queries loaded before the baseline
    base = rss_mb()
    started = time.perf_counter()
    index = WorkspaceIndex(folder)
    index.build()
    seconds = time.perf_counter() - started
    gc.collect()
    count = sum(len(f.definitions) for f in index.files.values())
    print(
        f"{folder}: {len(index.files)} files, {index.text_bytes() / 1e6:.1f} MB read, "
        f"{count} definitions, {seconds:.1f} s, RSS +{rss_mb() - base:.0f} MB"
    )


if __name__ == "__main__":
    main()
