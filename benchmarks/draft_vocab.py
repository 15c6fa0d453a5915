"""The draft with its whole head against the draft trimmed to code's tokens
(``codespec/ggml/trimmed_vocab.py``): how often each guesses the next token of real code, what
a step costs, and its memory (results in docs/benchmarks.md, "A trimmed draft vocabulary").

The code is the bench corpus (``codespec bench --fetch`` puts it in the user cache), which the
token list was not counted on, in every language it holds. Each window of a file is read by
the draft teacher-forced: its first ``CONTEXT`` tokens prefilled, then the next ``SCORED`` in
one pass whose every row's top guess is compared with the token that follows. A guess counts
as *confident* where the draft's probability reaches the threshold at which it keeps drafting
(``engine/draft.py``): those are the guesses it offers for verification. A step is one token
after a cached window. Each draft runs in a process of its own, one after the other.

    .venv/bin/python benchmarks/draft_vocab.py [--windows-per-language 12] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

CONTEXT, SCORED = 192, 64
THRESHOLD = 0.6  # DraftProposer's default confidence threshold
ENDINGS = {
    "python": ".py", "javascript": ".js", "typescript": ".ts", "go": ".go", "rust": ".rs",
    "c": ".c", "cpp": ".hpp", "lua": ".lua", "shell": ".sh",
}  # fmt: skip


def corpus_windows(per_language: int, tokenizer) -> dict[str, list[list[int]]]:
    """Per language, windows of ``CONTEXT + SCORED + 1`` tokens from the corpus's files, the
    files taken in sorted order, one window each."""
    from codespec.models.sources import cache_root

    root = cache_root().parent / "corpus"
    out: dict[str, list[list[int]]] = {}
    for language, ending in ENDINGS.items():
        windows = []
        for path in sorted(root.rglob(f"*{ending}")):
            try:
                ids = tokenizer.encode(path.read_text(encoding="utf-8")).ids
            except (OSError, UnicodeDecodeError):
                continue
            if len(ids) > CONTEXT + SCORED + 1:
                windows.append(ids[: CONTEXT + SCORED + 1])
            if len(windows) == per_language:
                break
        if windows:
            out[language] = windows
    return out


def run_one(kind: str, per_language: int) -> dict:
    """In this process: the draft of ``kind`` ("full", or the size of a trimmed head) over the
    windows."""
    from tokenizers import Tokenizer

    from codespec.ggml.backend import GgmlModel
    from codespec.ggml.trimmed_vocab import TrimmedDraft, prepared_trimmed_draft
    from codespec.models import gguf_file, load_manifest, tokenizer_folder
    from codespec.models.sources import cache_root, source_key

    manifest = load_manifest()
    assert manifest.draft is not None
    folder = tokenizer_folder(manifest.target, manifest.install_hint)
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    path = gguf_file(manifest.draft, manifest.install_hint)
    if kind != "full":
        key = source_key(manifest.draft, path)
        cache = cache_root() / "draft-vocab"
        prepared = prepared_trimmed_draft(path, key, cache, lambda _: None, int(kind))
        assert prepared is not None
        model = GgmlModel(str(prepared[0]), padded=False)
        draft = TrimmedDraft(model, prepared[1], 151936)
    else:
        draft = model = GgmlModel(str(path), padded=False)
    result: dict = {"languages": {}}
    steps: list[float] = []
    for language, windows in corpus_windows(per_language, tokenizer).items():
        right = confident = confident_right = total = 0
        for ids in windows:
            draft.reset()
            draft.prefill(ids[:CONTEXT])
            rows = np.asarray(draft.forward(ids[CONTEXT : CONTEXT + SCORED], all_logits=True))
            truth = np.asarray(ids[CONTEXT + 1 : CONTEXT + SCORED + 1])
            guess = rows.argmax(axis=-1)
            top = rows.max(axis=-1, keepdims=True)
            p = 1.0 / np.exp(rows - top).sum(axis=-1)  # the top guess's probability
            right += int((guess == truth).sum())
            sure = p >= THRESHOLD
            confident += int(sure.sum())
            confident_right += int((sure & (guess == truth)).sum())
            total += len(truth)
            for token in ids[CONTEXT + SCORED : CONTEXT + SCORED + 1]:  # a step, timed
                draft.crop(CONTEXT + SCORED)
                t0 = time.perf_counter()
                draft.forward([token], all_logits=False)
                steps.append(time.perf_counter() - t0)
        result["languages"][language] = {
            "tokens": total,
            "top1": right / total,
            "confident_share": confident / total,
            "confident_right": confident_right / max(confident, 1),
        }
    result["step_ms_median"] = 1000 * float(np.median(steps))
    status = Path("/proc/self/status")
    if status.exists():
        line = next(x for x in status.read_text().splitlines() if x.startswith("VmRSS:"))
        result["rss_mb"] = int(line.split()[1]) / 1024
    del model
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--windows-per-language", type=int, default=12)
    ap.add_argument("--sizes", default="32768,65536", help="trimmed head sizes to run")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(run_one(args.one, args.windows_per_language)))
        return 0
    from codespec.machine import cpu_kind

    results = {"cpu": cpu_kind(), "context": CONTEXT, "scored": SCORED}
    kinds = ["full", *args.sizes.split(",")]
    for kind in kinds:
        done = subprocess.run(
            [sys.executable, __file__, "--one", kind, "--windows-per-language",
             str(args.windows_per_language)],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        results[kind] = json.loads(done.stdout.strip().splitlines()[-1])
    print("top-1 right / right where sure (share sure), by head: " + ", ".join(kinds))
    for language in results["full"]["languages"]:
        cells = []
        for kind in kinds:
            r = results[kind]["languages"][language]
            cells.append(
                f"{r['top1']:.3f} / {r['confident_right']:.3f} ({r['confident_share']:.2f})"
            )
        print(f"{language:12} " + "   ".join(cells))
    for kind in kinds:
        r = results[kind]
        print(f"{kind}: step {r['step_ms_median']:.1f} ms, RSS {r.get('rss_mb', 0):.0f} MB")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
