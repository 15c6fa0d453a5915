"""Whole decode passes of the embedded target: the lean decoder pass (``engine/decoder.py``)
against the model's own Hugging Face forward, side by side in one process, on the same cache.

Passes of 1, 2 and 4 rows after a real prompt (a stdlib Python file) of two lengths; the two
paths alternate, so both see the same machine; the logits are compared bit for bit too.

    .venv/bin/python benchmarks/decoder_pass.py [--repeats 11] [--contexts 150,1000]
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lean_passes import arguments, lean_target, machine_line, prompt_ids  # noqa: E402


def main() -> None:
    args = arguments(__doc__.split("\n\n")[0], repeats=11, contexts="150,1000")
    contexts, widths = args.contexts, args.widths
    pair = lean_target("decoder_pass")
    target = pair.local.target
    print(machine_line(pair))
    ids = prompt_ids(pair, max(contexts) + max(widths))
    print("| context | rows | lean pass p50 | model forward p50 | lean / forward | same bits |")
    print("|---|---|---|---|---|---|")
    for context in contexts:
        target.reset()
        target.prefill(ids[:context])
        for width in widths:
            tokens = ids[context : context + width]
            seconds: dict[bool, list[float]] = {True: [], False: []}
            logits: dict[bool, np.ndarray] = {}
            for _ in range(args.repeats):
                for lean in (True, False):
                    target.lean_decoder = lean
                    t0 = time.perf_counter()
                    logits[lean] = target.forward(tokens)
                    seconds[lean].append(time.perf_counter() - t0)
                    target.crop(context)
            fast, slow = (1000 * statistics.median(seconds[k]) for k in (True, False))
            same = np.array_equal(logits[True], logits[False])
            row = [context, width, f"{fast:.1f} ms", f"{slow:.1f} ms", f"{fast / slow:.2f}", same]
            print("| " + " | ".join(map(str, row)) + " |")
    target.lean_decoder = True


if __name__ == "__main__":
    main()
