"""Kernel table: ms per pass of M rows through the target's linear layers (28 decoder layers of
Qwen2.5-Coder-1.5B + the LM head) in fp32, bf16, weight-only int8 and int4, and int8 weights
with int8 activations (w8a8, fbgemm), on this machine, and
its memory read bandwidth (the floor a decode pass cannot beat: the bytes of the weights).

Random weights of the real shapes, one format at a time (fp32 needs ~6 GB while it runs).

    .venv/bin/python benchmarks/linear_kernels.py [--rows 1,2,4,8] [--json bench-out/kernels.json]
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from codespec.machine import cpu_kind, cpu_model  # noqa: E402
from codespec.quant.layers import QuantLinear, quantize_int4, quantize_int8  # noqa: E402

HIDDEN, INTERMEDIATE, KV, LAYERS, VOCAB = 1536, 8960, 256, 28, 151936
LAYER_SHAPES = [  # (out, in) of q, k, v, o, gate, up, down
    (HIDDEN, HIDDEN),
    (KV, HIDDEN),
    (KV, HIDDEN),
    (HIDDEN, HIDDEN),
    (INTERMEDIATE, HIDDEN),
    (INTERMEDIATE, HIDDEN),
    (HIDDEN, INTERMEDIATE),
]


def layers_of(fmt: str) -> list:
    """Every linear layer of the target in one format (a callable each) and their bytes."""
    out, size = [], 0
    shapes = LAYER_SHAPES * LAYERS + [(VOCAB, HIDDEN)]
    for n, k in shapes:
        w = torch.randn(n, k) * 0.02
        if fmt in ("fp32", "bf16"):
            dense = w if fmt == "fp32" else w.bfloat16()
            out.append(lambda x, d=dense: x @ d.T)
            size += dense.numel() * dense.element_size()
        else:
            q = quantize_int4(w) if fmt == "int4" else quantize_int8(w)
            kind = fmt if fmt != "int4" or n % 16 == 0 else "int8"
            layer = QuantLinear(q, None, kind, activation_dtype(fmt))
            out.append(layer)
            # w8a8 keeps its weight packed outside the buffers: int8 codes + a scale per row
            size += sum(b.numel() * b.element_size() for b in layer.buffers()) or n * k + 4 * n
        del w
    return out, size


def activation_dtype(fmt: str) -> torch.dtype:
    return torch.float32 if fmt in ("fp32", "w8a8") else torch.bfloat16


def pass_ms(layers: list, rows: int, dtype: torch.dtype, repeats: int = 3) -> float:
    x = torch.randn(rows, HIDDEN, dtype=dtype)
    xi = torch.randn(rows, INTERMEDIATE, dtype=dtype)
    times = []
    for _ in range(repeats + 1):
        t0 = time.perf_counter()
        for i, layer in enumerate(layers):
            layer(xi if i < len(layers) - 1 and i % 7 == 6 else x)
        times.append(time.perf_counter() - t0)
    return 1000 * sorted(times[1:])[len(times[1:]) // 2]


def read_bandwidth_gb_s(gigabytes: float = 1.0) -> float:
    """Bytes read per second by a sum over a tensor much larger than the caches."""
    a = torch.ones(int(gigabytes * 2**30 / 4))
    a.sum()
    t0 = time.perf_counter()
    for _ in range(3):
        a.sum()
    return 3 * a.numel() * 4 / (time.perf_counter() - t0) / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="1,2,4,8")
    ap.add_argument("--formats", default="fp32,bf16,int8,int4,w8a8")
    ap.add_argument("--json", default="bench-out/kernels.json")
    args = ap.parse_args()
    rows = [int(r) for r in args.rows.split(",")]
    bandwidth = read_bandwidth_gb_s()
    report = {
        "cpu": cpu_model(),
        "cpu_kind": cpu_kind(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "read_bandwidth_gb_s": bandwidth,
        "formats": {},
    }
    print(
        f"{cpu_model()} ({cpu_kind()}), {torch.get_num_threads()} threads, torch "
        f"{torch.__version__}; memory read bandwidth {bandwidth:.1f} GB/s"
    )
    for fmt in args.formats.split(","):
        layers, size = layers_of(fmt)
        times = {m: pass_ms(layers, m, activation_dtype(fmt)) for m in rows}
        floor = 1000 * size / 1e9 / bandwidth
        report["formats"][fmt] = {"ms": times, "weight_gb": size / 1e9, "floor_ms": floor}
        cells = "  ".join(f"M={m}: {t:7.1f} ms" for m, t in times.items())
        print(f"{fmt:>5}  {cells}   weights {size / 1e9:.2f} GB, bandwidth floor {floor:.0f} ms")
        del layers
        gc.collect()
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
