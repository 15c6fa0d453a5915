"""The mixed kernel plan against the chosen one, on the embedded target's own weights.

Q4_K_M keeps most of the target's linear layers as Q4_K (4-bit codes, group 32) and the rest
(half the ``v_proj`` and ``down_proj`` layers, the LM head) as Q6_K, stored as int8. The plan
codespec measures at load is one kernel for all of them: w8a8 (fbgemm, float32 between
layers). A mixed plan runs the Q4_K layers through torch's weight-only int4 kernel (bf16
activations, converted to and from float32 at each layer) and keeps w8a8 for the int8 ones.
This times a pass of M rows through all 197 linear layers both ways, in the same fusion and
two-digit inputs the product uses, and checks that the int4 kernel computes a row the same in
a pass of any width (the exactness speculation needs).

    .venv/bin/python benchmarks/mixed_plan.py [--rows 1,2,4,8,32] [--json bench-out/mixed.json]
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
from codespec.models import (
    load_manifest,  # noqa: E402
    prepared_folder,  # noqa: E402
)
from codespec.quant.fusion import FUSE_GROUPS, stacked  # noqa: E402
from codespec.quant.kernels import TWO_DIGIT_PROJECTIONS  # noqa: E402
from codespec.quant.layers import Int4Weight, QuantLinear  # noqa: E402
from codespec.quant.load import read_stored  # noqa: E402

PROJECTIONS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj")
PROJECTIONS += ("mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")


def groups_of(names: tuple[str, ...]) -> list[list[str]]:
    """The projections of one decoder layer, grouped as ``fusion.py`` fuses them."""
    out, taken = [], set()
    for group in FUSE_GROUPS:
        members = [n for n in names if n.rpartition(".")[2] in group]
        out.append(members)
        taken.update(members)
    return out + [[n] for n in names if n not in taken]


def layer(weights, names: list[str], kernel: str) -> tuple[QuantLinear, torch.dtype]:
    parts = [weights[f"{n}.weight"] for n in names]
    biases = [weights.get(f"{n}.bias") for n in names]
    weight = stacked(parts, kernel) if len(parts) > 1 else parts[0]
    bias = torch.cat(biases) if biases[0] is not None else None
    two_digit = kernel == "w8a8" and names[0].rpartition(".")[2] in TWO_DIGIT_PROJECTIONS
    digits = 2 if two_digit else 1
    dtype = torch.bfloat16 if kernel == "int4" else torch.float32
    return QuantLinear(weight, bias, kernel, dtype, digits), dtype


def build(weights, layers: int, mixed: bool) -> list[tuple[QuantLinear, torch.dtype]]:
    """Every linear layer of the target: w8a8 throughout, or int4 where stored as Q4_K."""
    out = []
    for index in range(layers):
        names = tuple(f"model.layers.{index}.{p}" for p in PROJECTIONS)
        for group in groups_of(names):
            int4 = [isinstance(weights[f"{n}.weight"], Int4Weight) for n in group]
            if not mixed or not any(int4):
                out.append(layer(weights, group, "w8a8"))
            elif all(int4):
                out.append(layer(weights, group, "int4"))
            else:  # a fused group split by storage: each part on its own kernel
                for name, four in zip(group, int4, strict=True):
                    out.append(layer(weights, [name], "int4" if four else "w8a8"))
    out.append(layer(weights, ["lm_head"], "w8a8"))
    return out


def pass_ms(layers, rows: int, repeats: int) -> float:
    """Median ms of one pass of ``rows`` float32 rows through every layer."""
    inputs = {n: torch.randn(rows, n) for n in {m.in_features for m, _ in layers}}

    def run() -> None:
        for module, dtype in layers:
            y = module(inputs[module.in_features])
            if dtype != torch.float32:
                y.float()

    run()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return 1000 * sorted(times)[len(times) // 2]


def int4_row_mismatches(layers, widths=(2, 3, 4, 5, 8, 16, 17, 64, 256)) -> int:
    """How often row 0 of a wider int4 pass differs from the same row passed alone."""
    bad = 0
    generator = torch.Generator().manual_seed(0)
    for module, _ in [pair for pair in layers if pair[0].kind == "int4"][:8]:
        x = torch.randn(max(widths), module.in_features, generator=generator)
        alone = module(x[:1])
        bad += sum(not torch.equal(module(x[:w])[:1], alone) for w in widths)
    return bad


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="1,2,3,4,8,32,128")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", default="bench-out/mixed-plan.json")
    args = ap.parse_args()
    manifest = load_manifest()
    folder = prepared_folder(manifest, manifest.target)
    weights = read_stored(folder)
    layers = json.loads((folder / "config.json").read_text())["num_hidden_layers"]
    report = {"cpu": cpu_model(), "cpu_kind": cpu_kind(), "torch": torch.__version__, "plans": {}}
    print(f"{cpu_model()} ({cpu_kind()}), {torch.get_num_threads()} threads")
    for plan, mixed in (("w8a8", False), ("mixed", True)):
        built = build(weights, layers, mixed)
        rows = [int(r) for r in args.rows.split(",")]
        times = {m: pass_ms(built, m, args.repeats if m < 32 else 3) for m in rows}
        entry: dict = {"ms": times}
        if mixed:
            entry["int4_row_mismatches"] = int4_row_mismatches(built)
        report["plans"][plan] = entry
        cells = "  ".join(f"M={m}: {t:7.1f} ms" for m, t in times.items())
        print(f"{plan:>6}  {cells}", flush=True)
        del built
        gc.collect()
    mismatches = report["plans"]["mixed"]["int4_row_mismatches"]
    print(f"int4 rows that differ with the pass width: {mismatches}")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
