"""What a decoding pass of 1, 2, 4 and 8 rows costs a GGUF model on one kernel library.

    python -m codespec.ggml.pass_prices MODEL.gguf [--library ik_llama.cpp] [--widths 1,2,4,8]

Speculation pays only where a pass over k rows costs little more than a pass over one, and what
it costs depends on the library's kernels for each weight type and width (``docs/
benchmarks.md``, "Pass prices by kernel library"). Each library is priced in a process of its
own, as the two cannot share one (``libraries.py``): ``codespec/library_choice.py`` runs this
module as a child and reads the one JSON line it prints; run by hand, it prices any GGUF file
on either library.

A pass is timed as the engine runs it: ``CONTEXT`` tokens already cached, every row of the pass
asking for its logits (verification reads them all), the pass's cells dropped after it; the
figure is the median of ``REPEATS`` passes after one untimed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from .libraries import NAMES
from .llama import LlamaContext, LlamaError, Settings

CONTEXT = 256
REPEATS = 5
WIDTHS = (1, 2, 4, 8)


def text_ids(n: int, vocab: int) -> list[int]:
    """Ordinary token ids (no control tokens), varied so attention is not degenerate."""
    return [1000 + (7919 * i) % min(vocab - 1000, 30000) for i in range(n)]


def price(path: str, library: str, widths=WIDTHS, threads: int = 0) -> dict:
    """Milliseconds per pass by width, and the prefill rate in tokens a second."""
    llama = LlamaContext(
        path,
        Settings(
            n_ctx=CONTEXT + 64, n_batch=CONTEXT, n_seq_max=2, threads=threads, library=library
        ),
    )
    ids = text_ids(CONTEXT + max(widths), llama.n_vocab)
    t0 = time.perf_counter()
    llama.decode([(t, i, (0,), i == CONTEXT - 1) for i, t in enumerate(ids[:CONTEXT])])
    prefill = CONTEXT / (time.perf_counter() - t0)
    ms = {}
    for width in widths:
        rows = [(ids[CONTEXT + i], CONTEXT + i, (0,), True) for i in range(width)]
        times = []
        for _ in range(REPEATS + 1):
            t0 = time.perf_counter()
            llama.decode(rows)
            times.append(time.perf_counter() - t0)
            llama.remove(0, CONTEXT, -1)
        ms[str(width)] = round(1000 * statistics.median(times[1:]), 2)
    llama.close()
    return {"library": library, "ms": ms, "prefill_tok_s": round(prefill, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m codespec.ggml.pass_prices")
    ap.add_argument("model", help="a GGUF file")
    ap.add_argument("--library", choices=NAMES, default="llama.cpp")
    ap.add_argument("--widths", default=",".join(map(str, WIDTHS)))
    ap.add_argument("--threads", type=int, default=0, help="0: one per core")
    args = ap.parse_args(argv)
    try:
        widths = tuple(int(w) for w in args.widths.split(","))
        if not all(0 < w <= 64 for w in widths):
            raise ValueError
    except ValueError:
        ap.error(f"--widths is a comma list of 1..64, not {args.widths!r}")
    try:
        print(json.dumps(price(args.model, args.library, widths, args.threads)))
    except LlamaError as exc:
        print(f"codespec: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
