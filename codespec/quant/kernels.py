"""Pick the activation dtype and each linear layer's kernel by timing them on this machine.

What is fast differs by processor: with AVX-512 bf16 the kernels take bf16 activations
natively; on an AVX2-only CPU bf16 is emulated, yet torch's weight-only int4/int8 kernels are
still several times faster with bf16 activations than with float32 (they convert internally);
fbgemm's integer kernel (``w8a8``, int8 activations too) beats both on AVX2
(``docs/benchmarks.md``, "Measurements behind the code"); and which wins depends on the
layer's shape and the pass width. So the first load on a machine times real layers of the
model (two decoder layers and the LM head) at pass widths 1, 2, 4 and 8 for every (dtype,
kernel) pair, keeps the decision in the cache (keyed by processor, flags, torch
version and threads) and every later start reads it back. An 8-bit kernel holds twice the
memory of int4, so it is chosen only where it is clearly faster (``INT8_MUST_WIN_BY``): int8
layer by layer, w8a8 for the whole model (see ``measure``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from ..files import FileError, parse_json, read_owned_text, write_atomically
from ..machine import machine_fingerprint
from .layers import (
    Int4Weight,
    QuantLinear,
    QuantWeight,
    int4_fits,
    w8a8_available,
    w8a8_weight_bits,
)

WIDTHS = (1, 2, 4, 8)
# Decode passes are mostly narrow: weigh the widths by how often the decode loop runs them.
WIDTH_WEIGHT = {1: 0.4, 2: 0.3, 4: 0.2, 8: 0.1}
DTYPES = ("bfloat16", "float32")
# int8 and w8a8 take twice the memory of int4: use them only when clearly faster
INT8_MUST_WIN_BY = 0.85
KERNELS = ("int4", "int8", "w8a8")
# "auto" chooses among all three (w8a8's memory is within the budget: a released draft is freed
# at once, and parked KV caches have a byte budget).
PLAN_FORMAT = 5  # 4: auto may choose w8a8; 5: w8a8 timed with two-digit inputs where used
# w8a8 layers whose input goes in two 8-bit digits (``layers.py``): the two whose inputs have the
# heaviest tails. Two digits everywhere come closer still to the float model but double the
# prefill cost; for these two the LM head runs on one row a pass at prefill, and a decode pass
# is bound by memory, where the second digit is nearly free (``docs/benchmarks.md``,
# "Measurements behind the code", has the divergences measured for each choice).
TWO_DIGIT_PROJECTIONS = ("down_proj", "lm_head")


def projection(name: str) -> str:
    """The kind of a linear layer (``q_proj``, ``down_proj``, ``lm_head``) from its name."""
    return name.rpartition(".")[2]


@dataclass
class KernelPlan:
    """The chosen activation dtype and the kernel for int4-stored layers, by projection."""

    dtype: str = "bfloat16"
    kernels: dict[str, str] = field(default_factory=dict)  # projection -> a name in KERNELS
    timings_ms: dict = field(default_factory=dict)  # dtype -> projection -> kernel -> width -> ms
    reason: str = ""
    fingerprint: str = ""
    measured_s: float = 0.0
    forced: str = ""  # a name in KERNELS when the user chose the kernel

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)

    def kernel_for(self, name: str, weight: QuantWeight) -> str:
        """The projection's kernel; an 8-bit one where the weight is int8-stored or of a shape
        the int4 kernel does not take."""
        kernel = self.forced or self.kernels.get(projection(name), "int4")
        n, k = weight.q.shape
        if kernel == "int4" and not (isinstance(weight, Int4Weight) and int4_fits(n, k)):
            return "int8"
        return kernel

    def digits_for(self, name: str, weight: QuantWeight) -> int:
        """How many 8-bit digits the layer's input takes (``w8a8`` only, see ``layers.py``)."""
        return input_digits(self.kernel_for(name, weight), projection(name))

    def summary(self) -> str:
        kinds = [self.forced] if self.forced else sorted(set(self.kernels.values())) or ["int8"]
        two = [
            p
            for p in TWO_DIGIT_PROJECTIONS
            if input_digits(self.forced or self.kernels.get(p, ""), p) == 2
        ]
        digits = f", {'/'.join(two)} inputs in two 8-bit digits" if two else ""
        bits = f" ({w8a8_weight_bits()}-bit codes)" if "w8a8" in kinds else ""
        return f"{self.dtype} activations, {'/'.join(kinds)} weights{bits}{digits} ({self.reason})"


def input_digits(kernel: str, proj: str) -> int:
    """How many 8-bit digits ``kernel`` gives the input of projection ``proj``."""
    return 2 if kernel == "w8a8" and proj in TWO_DIGIT_PROJECTIONS else 1


def _median_ms(run, repeats: int = 5) -> float:
    run()  # warm-up: first calls pay for allocation and code paths
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2] * 1000


def _time_layers(
    layers: list[tuple[QuantWeight, torch.Tensor | None]],
    proj: str,
    kind: str,
    dtype: torch.dtype,
    widths,
) -> dict[int, float]:
    """Median ms of one pass through ``layers`` (all of projection ``proj``) per width."""
    digits = input_digits(kind, proj)
    modules = [QuantLinear(w, b, kind, dtype, digits) for w, b in layers]
    k = modules[0].in_features
    out = {}
    for width in widths:
        x = torch.randn(width, k, dtype=dtype)
        out[width] = _median_ms(lambda x=x: [m(x) for m in modules])
    return out


def score(times: dict[int, float]) -> float:
    return sum(WIDTH_WEIGHT[w] * t for w, t in times.items())


def measure(
    weights: Mapping[str, QuantWeight | torch.Tensor], sample_layers: int = 2
) -> KernelPlan:
    """Time the kernels on the linear layers of the first ``sample_layers`` decoder layers and
    the LM head, and choose between two whole plans:

    * weight-only: for each projection the faster of int4 and int8, in the activation dtype
      (bf16 or float32) whose layers total least;
    * w8a8 everywhere, in float32 (the kernel's own input and output: no conversions).

    w8a8 holds twice the memory of int4, so it must win by ``INT8_MUST_WIN_BY``. A kernel whose
    one-row pass is over twice the best one-row pass in its dtype is not timed at the wider
    widths: the gaps between kernels are far wider than that (``docs/benchmarks.md``,
    "Measurements behind the code"), so waiting for them would only slow the first load."""
    t0 = time.perf_counter()
    by_proj: dict[str, list[tuple[QuantWeight, torch.Tensor | None]]] = {}
    for name in weights:
        parts = name.split(".")
        sampled = "layers" in parts and int(parts[parts.index("layers") + 1]) < sample_layers
        if not (sampled or name == "lm_head.weight"):
            continue
        weight = weights[name]
        if isinstance(weight, torch.Tensor):
            continue
        base = name.removesuffix(".weight")
        bias = weights.get(f"{base}.bias")
        if bias is not None and not isinstance(bias, torch.Tensor):
            raise ValueError(f"{base}.bias is quantized: biases stay dense")
        by_proj.setdefault(projection(base), []).append((weight, bias))
    runs = []  # (dtype, projection, kernel)
    for dtype in DTYPES:
        for proj, layers in by_proj.items():
            kernels = ["int8"]
            if all(isinstance(w, Int4Weight) and int4_fits(*w.q.shape) for w, _ in layers):
                kernels.insert(0, "int4")
            if dtype == "float32" and w8a8_available():
                kernels.append("w8a8")
            runs += [(dtype, proj, kernel) for kernel in kernels]
    timings: dict = {}
    for dtype, proj, kernel in runs:
        t1 = _time_layers(by_proj[proj], proj, kernel, getattr(torch, dtype), (1,))
        timings.setdefault(dtype, {}).setdefault(proj, {})[kernel] = t1
    for dtype, proj, kernel in runs:
        same_dtype = [t[1] for t in timings[dtype][proj].values()]
        if timings[dtype][proj][kernel][1] <= 2 * min(same_dtype):
            timings[dtype][proj][kernel] = _time_layers(
                by_proj[proj], proj, kernel, getattr(torch, dtype), WIDTHS
            )

    def cost(dtype: str, proj: str, kernel: str) -> float:
        times = timings[dtype][proj][kernel]
        # not timed wide (over twice its dtype's best at one row): priced as 8 one-row passes,
        # so that it is never chosen untimed
        return score(times) if len(times) == len(WIDTHS) else 8 * times[1]

    def weight_only(dtype: str, proj: str) -> tuple[str, float]:
        options = {k: cost(dtype, proj, k) for k in ("int4", "int8") if k in timings[dtype][proj]}
        kernel = min(options, key=lambda k: options[k])
        if "int4" in options and options[kernel] >= INT8_MUST_WIN_BY * options["int4"]:
            kernel = "int4"  # int8 does not win by enough to pay for its memory
        return kernel, options[kernel]

    totals = {d: sum(weight_only(d, p)[1] for p in by_proj) for d in DTYPES}
    dtype = min(totals, key=lambda d: totals[d])
    kernels = {p: weight_only(dtype, p)[0] for p in by_proj}
    other = next(d for d in DTYPES if d != dtype)
    reason = (
        f"weight-only {dtype} {totals[dtype]:.1f} ms vs {other} {totals[other]:.1f} ms "
        f"for the sampled layers (weighted over widths {'/'.join(map(str, WIDTHS))})"
    )
    if all("w8a8" in timings["float32"][p] for p in by_proj):
        w8a8 = sum(cost("float32", p, "w8a8") for p in by_proj)
        if w8a8 < INT8_MUST_WIN_BY * totals[dtype]:
            dtype, kernels = "float32", {p: "w8a8" for p in by_proj}
            reason = f"w8a8 float32 {w8a8:.1f} ms vs {reason}"
        else:
            reason += f"; w8a8 {w8a8:.1f} ms, not enough faster for its memory"
    return KernelPlan(
        dtype=dtype,
        kernels=kernels,
        timings_ms=timings,
        reason=reason,
        fingerprint=machine_fingerprint(),
        measured_s=time.perf_counter() - t0,
    )


def load_or_measure(
    weights: Mapping[str, QuantWeight | torch.Tensor], cache_file: Path, force: str | None = None
) -> KernelPlan:
    """The plan for this machine: read from ``cache_file`` or measured once and stored there.

    ``force`` (a name in ``KERNELS``) skips the kernel choice (the dtype is still measured)."""
    fingerprint = machine_fingerprint()
    try:
        saved = parse_json(read_owned_text(cache_file))
        entry = saved.get(fingerprint) if saved.get("format") == PLAN_FORMAT else None
    except (OSError, FileError, ValueError, AttributeError):
        saved, entry = {}, None
    if entry is not None:
        plan = KernelPlan(**entry)
    else:
        plan = measure(weights)
        saved = saved if isinstance(saved, dict) and saved.get("format") == PLAN_FORMAT else {}
        saved.update({"format": PLAN_FORMAT, fingerprint: asdict(plan)})
        write_atomically(cache_file, json.dumps(saved, indent=1))
    if force == "w8a8" and not w8a8_available():
        raise ValueError("w8a8 needs torch's fbgemm engine (an x86 CPU with AVX2)")
    if force in KERNELS:
        plan.forced = force
        if force == "w8a8":  # the kernel takes and returns float32: no conversions between
            plan.dtype = "float32"
        plan.reason = f"{force} chosen by the pair or the user; dtype {plan.reason}"
    return plan
