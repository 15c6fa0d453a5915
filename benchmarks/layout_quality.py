"""What a weight layout or a kernel library costs in quality: the target teacher-forced on real
code from the corpus (issue 63, item 2; results in docs/benchmarks.md, "Pass prices by kernel
library").

    .venv/bin/python benchmarks/layout_quality.py [--tokens 20000] [--window 512] [--json F]
        [--variants shipped,ik,q4_0,iq4_nl,ik-q4_0]

Each variant is a GGUF file on a kernel library: ``shipped`` (the embedded target on mainline
llama.cpp, the reference), ``ik`` (the same file on ik_llama.cpp), ``q4_0`` / ``iq4_nl``
(the file requantized by ``llama_model_quantize`` to pure Q4_0 / IQ4_NL, LM head included, on
mainline; made once into --work) and ``ik-q4_0`` (that copy on ik_llama.cpp). Every variant reads
the same windows of ``--window`` tokens, cut from files of every language in the corpus, in a
process of its own (the two libraries cannot share one). For each position it keeps the
log-probability of the real next token and the top-1 token. The report gives per variant:

  mean log-likelihood of the real next token, its change against the reference in % with a
  95% interval (from the per-window paired differences), top-1 accuracy on the real token, and
  how often its top-1 equals the reference's.

A layout whose log-likelihood falls more than 1% below the shipped file's is out (the issue's
rule); the bench's holes (``codespec bench --kernels ...``) then judge what a user sees.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

VARIANTS = {  # name -> (library, layout)
    "shipped": ("llama.cpp", "shipped"),
    "ik": ("ik_llama.cpp", "shipped"),
    "q4_0": ("llama.cpp", "q4_0"),
    "iq4_nl": ("llama.cpp", "iq4_nl"),
    "ik-q4_0": ("ik_llama.cpp", "q4_0"),
}
CHUNK = 128  # rows per pass (every row's logits are read)


def target_path() -> Path:
    from codespec.models import gguf_file, load_manifest

    manifest = load_manifest("qwen2.5-coder-1.5b")
    return gguf_file(manifest.target, manifest.install_hint)


def windows(tokens: int, window: int, seed: int = 0) -> list[list[int]]:
    """``tokens`` ids in windows of ``window``, one window per file, files spread over every
    language of the corpus in turn."""
    from codespec.bench.sources import default_corpus_dir, packages, source_files
    from codespec.models import load_manifest, load_tokenizer, tokenizer_folder
    from codespec.tokenizer import plain_ids

    manifest = load_manifest("qwen2.5-coder-1.5b")
    tokenizer = load_tokenizer(tokenizer_folder(manifest.target, manifest.install_hint))
    rng = random.Random(seed)
    by_language: dict[str, list[Path]] = {}
    for package in packages(default_corpus_dir()):
        by_language.setdefault(package.spec.language, []).extend(source_files(package))
    pools = {lang: rng.sample(files, len(files)) for lang, files in sorted(by_language.items())}
    out: list[list[int]] = []
    while sum(map(len, out)) < tokens and any(pools.values()):
        for files in pools.values():
            while files:
                ids = plain_ids(tokenizer, files.pop().read_text("utf-8", "replace"))
                if len(ids) > window:
                    start = rng.randrange(len(ids) - window)
                    out.append(ids[start : start + window])
                    break
    return out


def make_copy(source: Path, layout: str, work: Path) -> Path:
    """The target requantized to ``layout`` (once), by mainline's ``llama_model_quantize``,
    in a child process (this one may load ik_llama.cpp)."""
    if layout == "shipped":
        return source
    out = work / f"{source.stem}-{layout}.gguf"
    if not out.exists():
        code = (
            "import ctypes, sys, llama_cpp as L\n"
            "p = L.llama_model_quantize_default_params()\n"
            "p.allow_requantize = True; p.pure = True; p.nthread = 2\n"
            f"t = L.GGML_TYPE_{layout.upper()}\n"
            f"p.ftype = L.LLAMA_FTYPE_MOSTLY_{layout.upper()}\n"
            "p.output_tensor_type = p.token_embedding_type = t\n"
            "sys.exit(L.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(),"
            " ctypes.byref(p)))\n"
        )
        partial = out.with_suffix(".partial")
        subprocess.run(
            [sys.executable, "-c", code, str(source), str(partial)], check=True, capture_output=True
        )
        partial.rename(out)
    return out


def child(library: str, path: str, windows_file: str, out_file: str) -> None:
    """Teacher-force every window; save (log-probability of the real next token, top-1) per
    position."""
    from codespec.ggml.llama import LlamaContext, Settings

    chosen = json.loads(Path(windows_file).read_text())
    window = max(map(len, chosen))
    llama = LlamaContext(
        path, Settings(n_ctx=window + 64, n_batch=CHUNK, n_seq_max=1, library=library)
    )
    logprobs, top1 = [], []
    for ids in chosen:
        llama.clear()
        for start in range(0, len(ids) - 1, CHUNK):
            rows = range(start, min(start + CHUNK, len(ids) - 1))
            logits = llama.decode([(ids[i], i, (0,), True) for i in rows])
            assert logits is not None
            peak = logits.max(axis=1, keepdims=True)
            lse = peak[:, 0] + np.log(np.exp(logits - peak).sum(axis=1))
            real = np.array([ids[i + 1] for i in rows])
            logprobs.append(logits[np.arange(len(real)), real] - lse)
            top1.append(logits.argmax(axis=1))
    np.savez(out_file, logprob=np.concatenate(logprobs), top1=np.concatenate(top1))


def report(name: str, ref: dict, got: dict, lengths: list[int], real: np.ndarray) -> dict:
    """The variant's figures against the reference's."""
    bounds = np.cumsum([0] + [n - 1 for n in lengths])
    per_window = [
        float(got["logprob"][a:b].mean() - ref["logprob"][a:b].mean())
        for a, b in zip(bounds[:-1], bounds[1:], strict=True)
    ]
    mean_ref = float(ref["logprob"].mean())
    mean = float(got["logprob"].mean())
    spread = statistics.stdev(per_window) if len(per_window) > 1 else 0.0
    half = 1.96 * spread / math.sqrt(len(per_window))
    change = 100 * (mean - mean_ref) / abs(mean_ref)  # (log-likelihoods are negative)
    return {
        "variant": name,
        "mean_loglik": round(mean, 5),
        "change_pct": round(change, 3),
        "change_pct_95": round(100 * half / abs(mean_ref), 3),
        "top1_accuracy": round(float((got["top1"] == real).mean()), 4),
        "top1_agrees_with_shipped": round(float((got["top1"] == ref["top1"]).mean()), 4),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=20000)
    ap.add_argument("--window", type=int, default=512)
    ap.add_argument("--variants", default="shipped,ik,q4_0,iq4_nl")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "layout-quality")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return 0
    names = ["shipped"] + [v for v in args.variants.split(",") if v and v != "shipped"]
    unknown = [v for v in names if v not in VARIANTS]
    if unknown:
        ap.error(f"unknown variants {unknown}; known: {', '.join(VARIANTS)}")
    args.work.mkdir(parents=True, exist_ok=True)
    chosen = windows(args.tokens, args.window)
    lengths = [len(w) for w in chosen]
    windows_file = args.work / "windows.json"
    windows_file.write_text(json.dumps(chosen))
    print(f"{len(chosen)} windows, {sum(lengths)} tokens", flush=True)
    source = target_path()
    results = {}
    for name in names:
        library, layout = VARIANTS[name]
        path = make_copy(source, layout, args.work)
        out = args.work / f"{name}.npz"
        subprocess.run(
            [sys.executable, __file__, "--child", library, str(path), str(windows_file), str(out)],
            check=True,
        )
        results[name] = dict(np.load(out))
        print(f"{name}: done", flush=True)
    real = np.concatenate([np.array(w[1:]) for w in chosen])
    rows = [report(n, results["shipped"], results[n], lengths, real) for n in names]
    print(f"{'variant':<10} {'loglik':>9} {'change %':>14} {'top-1 acc':>9} {'= shipped':>9}")
    for r in rows:
        change = f"{r['change_pct']:+.2f} ± {r['change_pct_95']:.2f}"
        print(
            f"{r['variant']:<10} {r['mean_loglik']:>9.4f} {change:>14} "
            f"{r['top1_accuracy']:>9.4f} {r['top1_agrees_with_shipped']:>9.4f}"
        )
    if args.json:
        args.json.write_text(json.dumps({"tokens": sum(lengths), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
