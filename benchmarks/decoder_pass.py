"""Whole decode passes of the embedded target: the lean decoder pass (``engine/decoder.py``)
against the model's own Hugging Face forward, side by side in one process, on the same cache.

Passes of 1, 2 and 4 rows after a real prompt (a stdlib Python file) of two lengths; the two
paths alternate, so both see the same machine; the logits are compared bit for bit too.

    .venv/bin/python benchmarks/decoder_pass.py [--repeats 11] [--contexts 150,1000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import sysconfig
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from codespec.bench.main import cpu_kind, cpu_model  # noqa: E402
from codespec.runtime import load_pair  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--contexts", default="150,1000")
    parser.add_argument("--widths", default="1,2,4")
    args = parser.parse_args()
    pair = load_pair(use_draft=False, progress=lambda m: None)
    target = pair.engine.target
    if not target._lean():
        sys.exit("decoder_pass: this model does not run the lean pass; nothing to compare")
    print(f"{cpu_model()} ({cpu_kind()}), {torch.get_num_threads()} threads; {pair.quantization}")
    source = Path(sysconfig.get_paths()["stdlib"], "json", "decoder.py").read_text()
    ids = pair.tokenizer(source)["input_ids"]
    print("| context | rows | lean pass p50 | model forward p50 | lean / forward | same bits |")
    print("|---|---|---|---|---|---|")
    for context in (int(c) for c in args.contexts.split(",")):
        target.reset()
        target.prefill(ids[:context])
        for width in (int(w) for w in args.widths.split(",")):
            tokens = ids[context : context + width]
            seconds: dict[bool, list[float]] = {True: [], False: []}
            logits: dict[bool, torch.Tensor] = {}
            for _ in range(args.repeats):
                for lean in (True, False):
                    target.lean_decoder = lean
                    t0 = time.perf_counter()
                    logits[lean] = target.forward(tokens)
                    seconds[lean].append(time.perf_counter() - t0)
                    target.crop(context)
            fast, slow = (1000 * statistics.median(seconds[k]) for k in (True, False))
            same = torch.equal(logits[True], logits[False])
            row = [context, width, f"{fast:.1f} ms", f"{slow:.1f} ms", f"{fast / slow:.2f}", same]
            print("| " + " | ".join(map(str, row)) + " |")
    target.lean_decoder = True


if __name__ == "__main__":
    main()
