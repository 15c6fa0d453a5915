"""fbgemm against oneDNN for the w8a8 layers: ms per pass of M rows, projection by projection.

codespec's w8a8 layers run on fbgemm (``torch.ops.quantized``). oneDNN's int8 matmul
(``torch.ops.onednn.qlinear_pointwise``, the op PyTorch's x86 Inductor quantization uses)
takes AMX tiles on Xeons that have them. Both sum the integer products exactly, so handed the
same rounded inputs they return the same bits (checked here); the question is speed, at decode
widths (1-16 rows) and at prefill widths (64-512).

Random int8 weights of the target's shapes (Qwen2.5-Coder-1.5B: fused q/k/v, o, fused
gate/up, down, the LM head); the two backends take turns at every width, and each cell is the
25th percentile of ``--rounds`` timings (this machine is shared: medians move with it).

    .venv/bin/python benchmarks/w8a8_backends.py [--rows 1,2,4,8,16,64,256,512] [--json F]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from codespec.machine import cpu_flags, cpu_kind, cpu_model  # noqa: E402
from codespec.quant.layers import (  # noqa: E402
    ACTIVATION_ZERO,
    prepack_w8a8,
    quantize_int8,
)

# (outputs, inputs, layers of it in the model)
SHAPES = {
    "qkv_proj": (2048, 1536, 28),
    "o_proj": (1536, 1536, 28),
    "gate_up_proj": (17920, 1536, 28),
    "down_proj": (1536, 8960, 28),
    "lm_head": (151936, 1536, 1),
}


def fbgemm(weight):
    packed = prepack_w8a8(weight)
    return lambda codes: torch.ops.quantized.linear_with_input_q_dq_qweight_dq_output_fp32(
        codes, 1.0, ACTIVATION_ZERO, packed
    )


def onednn(weight):
    packed = torch.ops.onednn.qlinear_prepack(weight.q, None)
    scale, zeros = weight.scale.float(), torch.zeros(weight.q.shape[0], dtype=torch.long)

    def run(codes):
        stored = codes.add(ACTIVATION_ZERO).to(torch.uint8)
        return torch.ops.onednn.qlinear_pointwise(
            stored, 1.0, ACTIVATION_ZERO, packed, scale, zeros,
            None, 1.0, 0, torch.float32, "none", [], "",
        )  # fmt: skip

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="1,2,4,8,16,64,256,512")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--json", default="bench-out/w8a8-backends.json")
    args = ap.parse_args()
    widths = [int(r) for r in args.rows.split(",")]
    amx = "amx_int8" in cpu_flags()
    print(f"{cpu_model()} ({cpu_kind()}, AMX int8: {amx}), {torch.get_num_threads()} threads")
    report = {"cpu": cpu_model(), "cpu_kind": cpu_kind(), "amx_int8": amx, "projections": {}}
    totals = {b: dict.fromkeys(widths, 0.0) for b in ("fbgemm", "onednn")}
    for name, (n, k, count) in SHAPES.items():
        weight = quantize_int8(torch.randn(n, k) * 0.02)
        runs = {"fbgemm": fbgemm(weight), "onednn": onednn(weight)}
        cells = {}
        for m in widths if name != "lm_head" else [w for w in widths if w <= 16]:
            codes = torch.randint(-127, 128, (m, k)).float()
            same = torch.equal(runs["fbgemm"](codes), runs["onednn"](codes))
            times = {b: [] for b in runs}
            for _ in range(args.rounds):
                for backend, run in runs.items():
                    run(codes)
                    t0 = time.perf_counter()
                    run(codes)
                    times[backend].append(1000 * (time.perf_counter() - t0))
            p25 = {b: sorted(t)[len(t) // 4] for b, t in times.items()}
            for b in runs:
                totals[b][m] += count * p25[b]
            cells[m] = {**p25, "same_bits": same}
            ratio = p25["onednn"] / p25["fbgemm"]
            print(
                f"{name:>13} M={m:<4} fbgemm {p25['fbgemm']:8.3f} ms  onednn "
                f"{p25['onednn']:8.3f} ms  ({ratio:.2f}x)  same bits: {same}"
            )
        report["projections"][name] = cells
        del weight, runs
    print("whole model (the LM head at <= 16 rows only: prefill runs it on one row):")
    for m in widths:
        f, o = totals["fbgemm"][m], totals["onednn"][m]
        print(f"  M={m:<4} fbgemm {f:8.1f} ms  onednn {o:8.1f} ms  ({o / f:.2f}x)")
    report["whole_model_ms"] = totals
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
