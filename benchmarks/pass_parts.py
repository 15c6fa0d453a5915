"""Where one decode pass of the embedded target spends its time: the linear layers, attention,
and the glue between them (norms, rotary embedding, cache writes, Python), against the floor
that this machine's memory bandwidth sets for reading the weights once.

Three variants of the same lean pass (``engine/decoder.py``) run interleaved after a real
prompt (a stdlib Python file), on the same cache:

* ``whole``: the pass as the engine runs it;
* ``no linears``: every linear layer hands back its output for that input from an earlier
  call (a copy: the GEMMs cost nothing, what they feed is unchanged);
* ``no linears, no attention``: the same, and attention returns its query.

So linears = whole - no linears, attention = no linears - neither, glue = neither. The parts
run in another order of memory traffic than inside a whole pass (weights no longer stream
through the caches), so they are estimates; the whole pass is the measured figure.

    .venv/bin/python benchmarks/pass_parts.py [--contexts 150,1000,2000] [--widths 1,2,4]
"""

from __future__ import annotations

import contextlib
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lean_passes import arguments, lean_target, machine_line, prompt_ids  # noqa: E402
from linear_kernels import read_bandwidth_gb_s  # noqa: E402

from codespec.quant.layers import QuantLinear  # noqa: E402
from codespec.torch_backend import attention  # noqa: E402


def weight_bytes(model: torch.nn.Module) -> int:
    """Bytes a pass reads from the weights: the tensors of every module but the input
    embedding (a pass reads q rows of that table; an LM head tied to it still counts, through
    the head), each shared tensor once. fbgemm's packed w8a8 weights are not tensors of the
    module, so each w8a8 layer adds one byte a weight."""
    embed = model.get_input_embeddings()
    tensors: dict[int, torch.Tensor] = {}
    total = 0
    for module in model.modules():
        if module is embed:
            continue
        for t in [*module.parameters(recurse=False), *module.buffers(recurse=False)]:
            tensors[t.data_ptr()] = t
        if isinstance(module, QuantLinear) and module.kind == "w8a8":
            total += module.in_features * module.out_features
    return total + sum(t.numel() * t.element_size() for t in tensors.values())


@contextlib.contextmanager
def free_linears(outputs: dict[tuple[int, torch.Size], torch.Tensor]) -> Iterator[None]:
    """Linear layers return a copy of their output remembered in ``outputs`` for each
    (layer, input shape), computing it the first time."""
    real = QuantLinear.forward

    def remembered(self: QuantLinear, x: torch.Tensor) -> torch.Tensor:
        key = (id(self), x.shape)
        if key not in outputs:
            outputs[key] = real(self, x)
        return outputs[key].clone()

    QuantLinear.forward = remembered
    try:
        yield
    finally:
        QuantLinear.forward = real


@contextlib.contextmanager
def free_attention() -> Iterator[None]:
    """Scaled dot-product attention returns (a copy of) its query row."""
    real = attention.F

    class NoAttention:
        @staticmethod
        def scaled_dot_product_attention(query, key, value, scale=None):
            return query.clone()

    attention.F = NoAttention
    try:
        yield
    finally:
        attention.F = real


@contextlib.contextmanager
def neither(outputs: dict) -> Iterator[None]:
    with free_linears(outputs), free_attention():
        yield


VARIANTS = {
    "whole": lambda outputs: contextlib.nullcontext(),
    "no linears": free_linears,
    "neither": neither,
}


def main() -> None:
    args = arguments(__doc__.split("\n\n")[0], repeats=15, contexts="150,1000,2000")
    contexts, widths = args.contexts, args.widths
    pair = lean_target("pass_parts")
    target = pair.local.target
    bandwidth = read_bandwidth_gb_s()
    weights = weight_bytes(target.model)
    floor_ms = 1000 * weights / (bandwidth * 1e9)
    print(machine_line(pair))
    print(
        f"memory read {bandwidth:.1f} GB/s; a pass reads {weights / 1e9:.2f} GB of weights: "
        f"floor {floor_ms:.1f} ms"
    )
    ids = prompt_ids(pair, max(contexts) + max(widths))
    print("| context | rows | whole pass p50 | linears | attention | glue | whole / floor |")
    print("|---|---|---|---|---|---|---|")
    for context in contexts:
        target.reset()
        target.prefill(ids[:context])
        for width in widths:
            tokens = ids[context : context + width]
            seconds: dict[str, list[float]] = {name: [] for name in VARIANTS}
            outputs: dict = {}
            for repeat in range(args.repeats + 1):
                for name, variant in VARIANTS.items():
                    with variant(outputs):
                        t0 = time.perf_counter()
                        target.forward(tokens)
                        elapsed = time.perf_counter() - t0
                        target.crop(context)
                    if repeat:  # the first round warms up (and fills the remembered outputs)
                        seconds[name].append(elapsed)
            whole, no_linears, glue = (1000 * statistics.median(seconds[n]) for n in VARIANTS)
            row = [
                context,
                width,
                f"{whole:.1f} ms",
                f"{whole - no_linears:.1f} ms",
                f"{no_linears - glue:.1f} ms",
                f"{glue:.1f} ms",
                f"{whole / floor_ms:.2f}",
            ]
            print("| " + " | ".join(map(str, row)) + " |")


if __name__ == "__main__":
    main()
