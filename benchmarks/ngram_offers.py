"""How often an n-gram span's tokens are kept, by match length and by how the matches vote.

For every position of the greedy completions recorded in a bench JSON (each hole's prompt
rebuilt from the corpus, the completion tokenized again), this asks the n-gram proposer for
its best span, as the decode loop would, and checks it against the completion: was the first
token kept, and how many after it. The rates by match-length bucket and support
(``engine/ngram.py``) are the priors in ``engine/acceptance.py``. Holes also listed in
``--split-by`` (the 39-hole tables) are counted apart from the rest, so that the priors can
be taken from holes the tables do not use. No model runs: only the tokenizer is loaded.
(The priors were taken from an 86-hole run's completions, ``git show 86d9cca:docs/bench.json``;
the defaults now read the runs kept in ``docs/``, whose completions differ from that one's.)

    .venv/bin/python benchmarks/ngram_offers.py [--from docs/bench-avx512.json]
        [--split-by docs/bench-avx2.json] [--json bench-out/ngram-offers.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from codespec.bench import sources  # noqa: E402
from codespec.bench.inputs import holes_from  # noqa: E402
from codespec.bench.runner import bench_settings, prompt_ids  # noqa: E402
from codespec.engine.acceptance import evidence_bucket  # noqa: E402
from codespec.engine.ngram import NgramProposer  # noqa: E402
from codespec.models import (  # noqa: E402
    load_manifest,
    load_tokenizer,
    prepared_folder,  # noqa: E402
)


def tokenizing_pair():
    """What ``prompt_ids`` reads of a loaded pair, without loading a model: the tokenizer,
    the manifest's tokens, and no measured prefill speed (the windows' token limits apply)."""
    manifest = load_manifest()
    folder = prepared_folder(manifest, manifest.target)
    engine = SimpleNamespace(prefill_rate=None)
    return SimpleNamespace(tokenizer=load_tokenizer(folder), manifest=manifest, engine=engine)


def offers_of(prompt: list[int], completion: list[int]) -> list[dict]:
    """The best span at every position after the first token, and how much of it was kept."""
    proposer = NgramProposer()
    out = []
    for i in range(1, len(completion)):
        spans = proposer.lookup(prompt + completion[:i], 32)
        if not spans:
            continue
        best = spans[0]
        kept = 0
        for token, truth in zip(best.tokens, completion[i:], strict=False):
            if token != truth:
                break
            kept += 1
        out.append(
            {
                "evidence": best.evidence,
                "support": best.support,
                "kept": kept,
                "span": len(best.tokens),
            }
        )
    return out


def rates(offers: list[dict]) -> dict[str, dict]:
    """First-token and later-token acceptance by (match-length bucket, support)."""
    counts: dict[tuple[int, str], list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for o in offers:
        c = counts[(evidence_bucket(o["evidence"]), o["support"])]
        if o["kept"] >= 1:
            c[0] += 1
            c[2] += o["kept"] - 1  # later tokens kept ...
            c[3] += 1 if o["kept"] < o["span"] else 0  # ... and the one that broke the span
        else:
            c[1] += 1
    return {
        f"{length} {support}": {
            "offers": kept + missed,
            "first": kept / (kept + missed),
            "then": then_kept / max(1, then_kept + then_missed),
            "then_tokens": then_kept + then_missed,
        }
        for (length, support), (kept, missed, then_kept, then_missed) in sorted(counts.items())
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--from", dest="recorded", default="docs/bench-avx512.json")
    ap.add_argument("--split-by", default="docs/bench-avx2.json")
    ap.add_argument("--json", default="bench-out/ngram-offers.json")
    args = ap.parse_args()
    pair = tokenizing_pair()
    holes, _, skipped = holes_from(Path(args.recorded), sources.default_corpus_dir())
    records = json.loads(Path(args.recorded).read_text())["holes"]
    completions = {(r["hole"]["file"], r["hole"]["start"]): r["completion"] for r in records}
    listed = json.loads(Path(args.split_by).read_text())["corpus"]["holes"]
    in_tables = {(h["file"], h["start"]) for h in listed}
    groups: dict[str, list[dict]] = {"held out": [], "in --split-by": []}
    settings = bench_settings(48, prompt_seconds=0)
    for hole in holes:
        key = (hole.file, hole.start)
        completion = pair.tokenizer(completions[key], add_special_tokens=False)["input_ids"]
        offers = offers_of(prompt_ids(pair, hole, settings), completion)
        groups["in --split-by" if key in in_tables else "held out"] += offers
    report = {"from": args.recorded, "skipped": skipped, "groups": {}}
    for name, offers in groups.items():
        table = rates(offers)
        report["groups"][name] = table
        holes_in = sum(((h.file, h.start) in in_tables) == (name != "held out") for h in holes)
        print(f"{name}: {holes_in} holes, {len(offers)} offers")
        print("| match length | support | offers | first kept | later kept (tokens) |")
        print("|---|---|---|---|---|")
        for key, row in table.items():
            length, support = key.split()
            print(
                f"| {length} | {support} | {row['offers']} | {row['first']:.2f} | "
                f"{row['then']:.2f} ({row['then_tokens']}) |"
            )
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
