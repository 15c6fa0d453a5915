"""ggml's CPU kernels as a verifier: is each row of a pass the same bits at every width, and
what does a pass of 1-16 rows cost? (issue 38, step 1; results in docs/benchmarks.md, "ggml
as a verifier").

Exact tree speculation needs the target's logits for a position to be the same bits whether
that position is computed alone (plain decoding) or as one row of a wider verification pass,
and the K/V a wide pass writes to be what plain decoding would have written. llama.cpp's CPU
backend picks kernels by batch width (repacked GEMV/GEMM, the tiled path, flash attention's
one-row split-KV path), so that holds only in some configurations. For each configuration this
runs, on the embedded GGUF with llama-cpp-python's low-level API:

  reference  the 17 tokens after a cached prefix, decoded one row at a time (plain decoding);
  width w    the first w of them in one pass: how many rows equal the reference bit for bit,
             and whether the next token, decoded alone after the wide pass's K/V, does too;
  timing     the median ms of a pass of 1, 2, 4, 8, 16 rows at the middle cache size.

Each configuration runs in a process of its own: ggml reads GGML_CPU_TILED_MM and
GGML_CPU_TILED_MM_FORCE once per process.

    .venv/bin/python benchmarks/ggml_invariance.py [--json out.json] [--configs NAME,...]
        [--group 4]   (every decoding pass padded to whole groups of 4 rows, as the backend)
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

WIDTHS = range(1, 17)
TIMED_WIDTHS = (1, 2, 4, 8, 16)
CACHED = (2000, 600, 100)  # descending: one prefill, then cut back
SEQUENCES = 4  # a tree's two leaves, one to park rejected cells under, one for padding rows
PADDING = 3


def configurations() -> dict[str, dict]:
    """Every combination of the settings that change the kernels a pass takes. A quantized
    K/V cache needs flash attention; it also keeps one-row passes off flash attention's
    split-KV path, which only f16/f32 caches take."""
    out = {}
    attention = (("on", "f16"), ("off", "f16"), ("on", "q8_0"))
    for repack, tiled, (flash, kv) in itertools.product(
        ("on", "off"), ("auto", "off", "force"), attention
    ):
        name = f"repack={repack} tiled={tiled} flash={flash} kv={kv}"
        out[name] = dict(repack=repack == "on", tiled=tiled, flash=flash == "on", kv=kv)
    return out


def tiled_env(tiled: str) -> dict[str, str]:
    if tiled == "off":
        return {"GGML_CPU_TILED_MM": "0"}
    if tiled == "force":
        return {"GGML_CPU_TILED_MM": "1", "GGML_CPU_TILED_MM_FORCE": "1"}
    return {}


# --- one configuration, in its own process -------------------------------------------------


class Context:
    """A llama.cpp context decoding tokens at given positions, each in one or more sequences
    (a token tree: one sequence per leaf, each node in every sequence of the leaves below it;
    the unified K/V cache lets one batch hold such coupled sequences)."""

    def __init__(self, gguf: str, repack: bool, flash: bool, kv: str, threads: int, n_ctx: int):
        import llama_cpp as L

        self.L = L
        L.llama_backend_init()
        mp = L.llama_model_default_params()
        mp.use_extra_bufts = repack
        self.model = L.llama_model_load_from_file(gguf.encode(), mp)
        if not self.model:
            raise SystemExit(f"llama.cpp could not load {gguf}")
        cp = L.llama_context_default_params()
        cp.n_ctx = n_ctx
        cp.n_batch = cp.n_ubatch = 512
        cp.n_seq_max = SEQUENCES
        cp.n_threads = cp.n_threads_batch = threads
        cp.flash_attn_type = (
            L.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash else L.LLAMA_FLASH_ATTN_TYPE_DISABLED
        )
        cp.kv_unified = True
        cp.type_k = cp.type_v = {"f16": L.GGML_TYPE_F16, "q8_0": L.GGML_TYPE_Q8_0}[kv]
        cp.no_perf = True
        self.ctx = L.llama_init_from_model(self.model, cp)
        if not self.ctx:
            raise SystemExit("llama.cpp could not make a context")
        self.memory = L.llama_get_memory(self.ctx)
        self.vocab = L.llama_model_get_vocab(self.model)
        self.n_vocab = L.llama_vocab_n_tokens(self.vocab)
        self.batch = L.llama_batch_init(512, 0, SEQUENCES)
        self.group = 1  # pad each pass that asks for logits to a multiple of this many rows

    def tokenize(self, text: str) -> list[int]:
        data = text.encode()
        buf = (self.L.llama_token * (len(data) + 16))()
        n = self.L.llama_tokenize(self.vocab, data, len(data), buf, len(buf), False, False)
        return list(buf[:n])

    def decode(self, tokens: list[int], start: int, logits: bool):
        """Decode ``tokens`` at positions start.. of sequence 0 in one pass; their logits rows
        if asked."""
        return self.decode_nodes([(t, start + i, (0,)) for i, t in enumerate(tokens)], logits)

    def decode_nodes(self, nodes: list[tuple[int, int, tuple[int, ...]]], logits: bool):
        """Decode (token, position, sequences) nodes in one pass, in this order. With a
        ``group`` > 1, a pass that asks for logits gets padding rows (under a sequence of
        their own, asking for logits too: llama.cpp runs the last layer and the output matrix
        on those rows only), freed after it, as codespec's ggml backend does."""
        import numpy as np

        n_real = len(nodes)
        if logits and self.group > 1:
            pad = -len(nodes) % self.group
            nodes = nodes + [(nodes[-1][0], k, (PADDING,)) for k in range(pad)]
        b = self.batch
        for i, (token, pos, seqs) in enumerate(nodes):
            b.token[i] = token
            b.pos[i] = pos
            b.n_seq_id[i] = len(seqs)
            for j, seq in enumerate(seqs):
                b.seq_id[i][j] = seq
            b.logits[i] = logits
        b.n_tokens = len(nodes)
        if self.L.llama_decode(self.ctx, b) != 0:
            raise SystemExit(f"llama_decode failed at {nodes[0][1]} (+{len(nodes)})")
        if len(nodes) > n_real:
            self.L.llama_memory_seq_rm(self.memory, PADDING, -1, -1)
        if not logits:
            return None
        rows = np.empty((n_real, self.n_vocab), dtype=np.float32)
        for i in range(n_real):
            ptr = self.L.llama_get_logits_ith(self.ctx, i)
            rows[i] = np.ctypeslib.as_array(ptr, shape=(self.n_vocab,))
        return rows

    def cut(self, length: int) -> None:
        """Forget every position from ``length`` on, in every sequence."""
        self.L.llama_memory_seq_rm(self.memory, -1, length, -1)

    def share(self, source: int, target: int) -> None:
        """Make every cell of sequence ``source`` belong to ``target`` too (metadata only)."""
        self.L.llama_memory_seq_cp(self.memory, source, target, -1, -1)

    def drop(self, seq: int, start: int) -> None:
        """Take sequence ``seq`` off every cell from position ``start`` on."""
        self.L.llama_memory_seq_rm(self.memory, seq, start, -1)

    def prefill(self, tokens: list[int]) -> float:
        t0 = time.perf_counter()
        for at in range(0, len(tokens), 512):
            self.decode(tokens[at : at + 512], at, logits=False)
        return time.perf_counter() - t0


def same_bits(a, b) -> bool:
    return a.tobytes() == b.tobytes()


def measure(ctx: Context, tokens: list[int], reps: int) -> dict:
    import numpy as np

    t_prefill = ctx.prefill(tokens[: CACHED[0]])
    result: dict = {"prefill_tok_s": CACHED[0] / t_prefill, "cached": {}}
    for cached in CACHED:
        ctx.cut(cached)
        after = tokens[cached : cached + max(WIDTHS) + 1]
        reference = np.concatenate([ctx.decode([t], cached + j, True) for j, t in enumerate(after)])
        ctx.cut(cached)
        widths = {}
        for w in WIDTHS:
            rows = ctx.decode(after[:w], cached, True)
            same = [same_bits(rows[i], reference[i]) for i in range(w)]
            diff = float(np.max(np.abs(rows - reference[:w])))
            argmax = bool(np.all(rows.argmax(1) == reference[:w].argmax(1)))
            follow = ctx.decode([after[w]], cached + w, True)[0]
            widths[w] = dict(
                rows_same=sum(same),
                max_abs_diff=diff,
                argmax_same=argmax,
                next_same=same_bits(follow, reference[w]),
            )
            ctx.cut(cached)
        result["cached"][cached] = widths
        result.setdefault("tree", {})[cached] = check_tree(ctx, after, reference, cached)
        if cached == CACHED[1]:
            result["ms_per_pass"] = time_passes(ctx, tokens, cached, reps)
    return result


def check_tree(ctx: Context, after: list[int], reference, cached: int) -> dict:
    """A two-leaf tree in one pass against plain decoding of each branch, then the next token
    of the accepted branch with the rejected one's cells freed or parked.

    Branch A is the text (``after[0:3]``), branch B shares its first token and then differs.
    The batch puts B's nodes before A's, so A's cells lie after B's: freeing B leaves holes
    below A that the next token fills (cell order no longer position order); parking B under a
    third sequence keeps the cells where they are, hidden from A."""
    import numpy as np

    root, a1, a2, following = after[0], after[1], after[2], after[3]
    b1, b2 = after[5], after[6]
    if b1 == a1:
        b1 = (b1 + 1) % ctx.n_vocab
    ctx.cut(cached)
    branch_b = np.concatenate(
        [ctx.decode([t], cached + j, True) for j, t in enumerate((root, b1, b2))]
    )
    nodes = [
        (root, cached, (0, 1)),
        (b1, cached + 1, (1,)),
        (b2, cached + 2, (1,)),
        (a1, cached + 1, (0,)),
        (a2, cached + 2, (0,)),
    ]
    expected = [reference[0], branch_b[1], branch_b[2], reference[1], reference[2]]
    out: dict = {"nodes": len(nodes)}
    for keep in ("freed", "parked"):
        ctx.cut(cached)
        ctx.share(0, 1)
        rows = ctx.decode_nodes(nodes, True)
        same = sum(same_bits(r, e) for r, e in zip(rows, expected, strict=True))
        out["nodes_same"] = min(same, out.get("nodes_same", same))
        if keep == "parked":
            ctx.share(1, 2)  # B's cells now belong to a sequence nobody reads
        ctx.drop(1, 0)
        nxt = ctx.decode([following], cached + 3, True)[0]
        out[f"next_same_{keep}"] = same_bits(nxt, reference[3])
        ctx.cut(cached)
        ctx.drop(2, 0)
    return out


def time_passes(ctx: Context, tokens: list[int], cached: int, reps: int) -> dict[int, float]:
    """Median ms of a pass of each timed width after ``cached`` tokens."""
    timing = {}
    for w in TIMED_WIDTHS:
        samples = []
        for _ in range(reps):
            t0 = time.perf_counter()
            ctx.decode(tokens[cached : cached + w], cached, True)
            samples.append(1000 * (time.perf_counter() - t0))
            ctx.cut(cached)
        timing[w] = sorted(samples)[len(samples) // 2]
    return timing


def run_one(args) -> None:
    config = json.loads(args.one)
    ctx = Context(
        args.gguf, config["repack"], config["flash"], config["kv"], args.threads, n_ctx=4096
    )
    ctx.group = args.group
    text = "".join(
        p.read_text() for p in sorted(Path(__file__).parent.parent.glob("codespec/engine/*.py"))
    )
    tokens = ctx.tokenize(text)
    need = CACHED[0] + max(WIDTHS) + 1
    if len(tokens) < need:
        raise SystemExit(f"need {need} tokens of text, have {len(tokens)}")
    print(json.dumps(measure(ctx, tokens, args.reps)))


# --- the driver ----------------------------------------------------------------------------


def verdict(result: dict) -> tuple[bool, int, int]:
    """(every row and every next row the same bits, rows differing, next rows differing)."""
    rows_off = next_off = 0
    for widths in result["cached"].values():
        for w, r in widths.items():
            rows_off += int(w) - r["rows_same"]
            next_off += not r["next_same"]
    return rows_off == 0 and next_off == 0, rows_off, next_off


def report(results: dict[str, dict]) -> str:
    lines = [
        "configuration                              invariant  rows off  next off  argmax off  "
        + "  ".join(f"{w:>2}-row ms" for w in TIMED_WIDTHS)
        + "  prefill tok/s"
    ]
    for name, r in results.items():
        ok, rows_off, next_off = verdict(r)
        argmax_off = sum(
            not x["argmax_same"] for widths in r["cached"].values() for x in widths.values()
        )
        ms = "  ".join(f"{r['ms_per_pass'][str(w)]:9.1f}" for w in TIMED_WIDTHS)
        lines.append(
            f"{name:<43}{'yes' if ok else 'no':>9}{rows_off:>10}{next_off:>10}"
            f"{argmax_off:>12}  {ms}{r['prefill_tok_s']:>15.1f}"
        )
    lines.append("")
    lines.append(tree_report(results))
    invariant = {n: r for n, r in results.items() if verdict(r)[0]}
    if invariant:
        best = min(invariant, key=lambda n: sum(invariant[n]["ms_per_pass"].values()))
        lines.append(f"fastest invariant configuration: {best}")
    else:
        lines.append("no configuration is invariant")
    lines.append(
        f"rows off / next off: over widths 1-{max(WIDTHS)} at {', '.join(map(str, CACHED))} cached "
        "tokens, rows of a wide pass (and the token decoded alone after it) whose logits differ "
        "in any bit from plain one-row decoding"
    )
    return "\n".join(lines)


def tree_report(results: dict[str, dict]) -> str:
    """Per configuration: tree nodes differing from plain decoding of their branch, and passes
    after which the accepted branch's next token differs, the rejected cells freed or parked."""
    lines = ["configuration                              tree nodes off  next off freed  parked"]
    for name, r in results.items():
        trees = r.get("tree", {}).values()
        nodes_off = sum(t["nodes"] - t["nodes_same"] for t in trees)
        freed = sum(not t["next_same_freed"] for t in trees)
        parked = sum(not t["next_same_parked"] for t in trees)
        lines.append(f"{name:<43}{nodes_off:>14}{freed:>16}{parked:>8}")
    lines.append(
        f"(a 5-node, two-leaf tree after each of {', '.join(map(str, CACHED))} cached tokens)"
    )
    return "\n".join(lines)


def default_gguf() -> str:
    from codespec.models import gguf_file, load_manifest

    pair = load_manifest()
    return str(gguf_file(pair.target, pair.install_hint))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gguf", help="the GGUF file (default: the embedded target's)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--reps", type=int, default=9, help="timed passes per width")
    parser.add_argument("--configs", help="comma-separated configuration names (default: all)")
    parser.add_argument("--json", help="write every figure here")
    parser.add_argument(
        "--group",
        type=int,
        default=1,
        help="pad every decoding pass to a multiple of this many rows (4: the ggml backend)",
    )
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.gguf = args.gguf or default_gguf()
    if args.one:
        run_one(args)
        return
    configs = configurations()
    if args.configs:
        wanted = [c.strip() for c in args.configs.split(",")]
        unknown = [c for c in wanted if c not in configs]
        if unknown:
            raise SystemExit(f"unknown configuration {unknown[0]!r}; known: {', '.join(configs)}")
        configs = {c: configs[c] for c in wanted}
    results = {}
    for name, config in configs.items():
        env = {k: v for k, v in os.environ.items() if not k.startswith("GGML_CPU_TILED")}
        env.update(tiled_env(config["tiled"]))
        cmd = [
            sys.executable,
            __file__,
            "--one",
            json.dumps(config),
            "--gguf",
            args.gguf,
            "--threads",
            str(args.threads),
            "--reps",
            str(args.reps),
            "--group",
            str(args.group),
        ]
        t0 = time.perf_counter()
        out = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if out.returncode != 0:
            last = (out.stderr.strip().splitlines() or ["no message"])[-1]
            print(f"{name}: failed: {last}", flush=True)
            continue
        results[name] = json.loads(out.stdout.strip().splitlines()[-1])
        ok, rows_off, next_off = verdict(results[name])
        print(
            f"{name}: invariant={ok} rows off={rows_off} next off={next_off} "
            f"({time.perf_counter() - t0:.0f} s)",
            flush=True,
        )
    from codespec.machine import cpu_kind, cpu_model

    machine = f"{cpu_model()} ({cpu_kind()}), {args.threads} threads"
    if args.group > 1:
        machine += f", passes padded to multiples of {args.group} rows"
    print(f"\n{machine}, {Path(args.gguf).name}")
    print(report(results))
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine, "results": results}, indent=1))


if __name__ == "__main__":
    main()
