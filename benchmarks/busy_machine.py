"""What a pass costs when another process keeps a core busy, by backend and thread count.

The embedded target on each backend (torch's configured kernels, ggml's padded passes) after
``--context`` cached tokens: the median pass of 1, 2, 4 (and 8) rows, in three situations:

* ``quiet``: nothing else runs, all threads;
* ``busy, all threads``: one CPU-bound process per ``--load`` beside it, the same threads (what
  happens when threads wait for each other by spinning and one of them is descheduled);
* ``busy, free cores``: the same load, as many threads as ``machine.FreeCores`` says are free
  (what the engine now runs).

A pass that degrades in proportion to the CPU it lost costs about ``cores / free`` times its
quiet price. Each backend loads in turn (one copy of the weights at a time).

    .venv/bin/python benchmarks/busy_machine.py [--backends torch,ggml] [--load 1]
"""

from __future__ import annotations

import argparse
import json
import time

from codespec import machine
from codespec.bench.main import background_load
from codespec.engine.timing import pass_seconds
from codespec.runtime import load_pair


def pass_ms(target, context: list[int], width: int, repeats: int) -> float:
    """Median ms of a ``width``-row pass after ``context`` (the first one not counted)."""
    return 1000 * pass_seconds(target, context, [100 + k for k in range(width)], repeats)


def measure(backend: str, args) -> dict:
    pair = load_pair(backend=backend, draft_mode="off", progress=lambda m: None)
    target, cores = pair.local.target, pair.local.max_threads
    widths = [w for w in args.widths if w <= getattr(target, "max_pass_rows", 1 << 30)]
    context = [(7 * i + 100) % 150000 for i in range(args.context)]
    rows: dict[str, dict[int, float]] = {}
    target.use_threads(cores)
    rows["quiet"] = {w: pass_ms(target, context, w, args.repeats) for w in widths}
    with background_load(args.load):
        time.sleep(1.0)
        rows["busy, all threads"] = {w: pass_ms(target, context, w, args.repeats) for w in widths}
        free = machine.FreeCores(cores=cores, window_s=0.0)
        free.free()
        time.sleep(1.0)
        threads = free.free()
        target.use_threads(threads)
        rows[f"busy, free cores ({threads})"] = {
            w: pass_ms(target, context, w, args.repeats) for w in widths
        }
    target.use_threads(cores)
    return dict(backend=backend, threads=cores, label=pair.quantization, ms=rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backends", default="torch,ggml")
    parser.add_argument("--load", type=int, default=1, help="CPU-bound processes beside it")
    parser.add_argument("--context", type=int, default=600)
    parser.add_argument("--widths", default="1,2,4,8")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--json")
    args = parser.parse_args()
    args.widths = [int(w) for w in args.widths.split(",")]
    print(f"{machine.cpu_model()} ({machine.cpu_kind()}), {machine.usable_cores()} cores")
    results = []
    for backend in args.backends.split(","):
        result = measure(backend, args)
        results.append(result)
        print(f"\n{backend}: {result['label']}")
        widths = sorted({w for ms in result["ms"].values() for w in ms})
        print(f"{'situation':28s}" + "".join(f"{f'{w}-row ms':>12s}" for w in widths))
        for situation, ms in result["ms"].items():
            print(f"{situation:28s}" + "".join(f"{ms[w]:12.1f}" for w in widths))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(dict(machine=machine.cpu_model(), results=results), out, indent=1)


if __name__ == "__main__":
    main()
