"""`codespec bench --peer llama.cpp`: the same holes through llama.cpp (llama-cpp-python), on the
GGUF file our target's weights come from, greedy, with and without its prompt-lookup decoding.

Each hole's prompt is our FIM prompt, token for token (the GGUF carries the same vocabulary), and
generation stops where ours does: at end-of-text, the token limit, or our stop rules (checked
after every token). As for ours: speed with the prompt already cached, time to first token cold
(a new place: full prefill) and warm (a keystroke: the cached prompt plus the typed tokens).
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from ..models import ModelError, gguf_file
from ..runtime import LoadedPair
from ..settings import Settings
from ..stops import StopChecker, TextStopRule
from .corpus import Hole
from .report import fmt, rate
from .runner import cursor_of, mode_of, prompt_ids, rounds_for, typed_at_cursor


def require() -> None:
    """Fail early, in one line, when llama-cpp-python is not installed (looked for without
    loading it: this process may run ik_llama.cpp, ``ggml/libraries.py``)."""
    from ..ggml.libraries import installed

    if not installed("llama.cpp"):
        raise ModelError(
            "--peer llama.cpp needs llama-cpp-python: .venv/bin/pip install -e '.[peer]'"
        )


def load_llama(model_path: str, prompt_lookup: bool):
    from llama_cpp import Llama
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    return Llama(
        model_path=model_path,
        n_ctx=2048,
        n_threads=os.cpu_count(),
        draft_model=LlamaPromptLookupDecoding(num_pred_tokens=10) if prompt_lookup else None,
        # A draft model needs logits for every position; 0.3.36 sizes its logits buffer from
        # this argument, not from the draft, so say it explicitly.
        logits_all=prompt_lookup,
        verbose=False,
    )


def generate(llm, pair: LoadedPair, hole: Hole, prompt: list[int], max_tokens: int) -> dict:
    """Greedy tokens for ``prompt`` until a stop; times from the call to each token."""
    rule = TextStopRule(pair.tokenizer, StopChecker(cursor_of(hole), mode_of(hole)))
    tokens: list[int] = []
    t0 = time.perf_counter()
    ttft = None
    for token in llm.generate(prompt, top_k=1, temp=0.0, repeat_penalty=1.0):
        ttft = ttft if ttft is not None else time.perf_counter() - t0
        if token in pair.stop_ids:
            break
        tokens.append(token)
        keep = rule(tokens)
        if keep is not None:
            del tokens[keep:]
            break
        if len(tokens) >= max_tokens:
            break
    total = time.perf_counter() - t0
    return dict(tokens=tokens, ttft_ms=1000 * (ttft or total), total_ms=1000 * total)


# an engine: complete(hole, prompt ids, max tokens) -> tokens and times, as ``generate``
Complete = Callable[[Hole, list[int], int], dict]

# the engines a peer run may measure: record key -> the name the report gives it
NAMES = {
    "plain": "llama.cpp plain",
    "prompt_lookup": "llama.cpp prompt lookup",
    "server_plain": "llama-server plain",
    "server_draft_model": "llama-server draft model",
}
# each speculative engine: (the engine whose output is its own greedy, the record's key for
# whether they match)
GREEDY_OF = {
    "prompt_lookup": ("plain", "lookup_matches_its_greedy"),
    "server_draft_model": ("server_plain", "server_draft_matches_its_greedy"),
}


@contextlib.contextmanager
def in_process(pair: LoadedPair, path: str, prompt_lookup: bool) -> Iterator[Complete]:
    llm = load_llama(path, prompt_lookup)
    try:
        yield lambda hole, prompt, n: generate(llm, pair, hole, prompt, n)
    finally:
        llm.close()


def engines(pair: LoadedPair, path: str, server: Path | None) -> list[tuple[str, Callable]]:
    """(record key, a context manager that loads it): loaded and measured one at a time.
    llama-cpp-python's own loops run in this process, so not beside ik_llama.cpp (the two
    libraries cannot share one: ``ggml/libraries.py``); llama-server runs in its own."""
    from ..ggml.libraries import loaded

    out: list[tuple[str, Callable]] = []
    if loaded() != "ik_llama.cpp":
        out += [
            ("plain", lambda: in_process(pair, path, False)),
            ("prompt_lookup", lambda: in_process(pair, path, True)),
        ]
    if server is not None:
        from .peer_server import server_variant, variants

        manifest, target = pair.manifest, Path(path)
        draft = gguf_file(manifest.draft, manifest.install_hint) if manifest.draft else None
        tokenizer, stops = pair.tokenizer, set(pair.stop_ids)
        for name, extra in variants(draft).items():
            out.append(
                (
                    f"server_{name}",
                    lambda e=extra: server_variant(server, target, e, tokenizer, stops),
                )
            )
    return out


def measure(complete: Complete, pair: LoadedPair, hole: Hole, prompt: list[int], settings) -> dict:
    """One engine on one hole, measured as ours is: cold, prompt cached (in rounds), keystroke."""
    cold = complete(hole, prompt, 1)  # new place: full prefill
    warm = complete(hole, prompt, settings.max_tokens)  # prompt cached
    # a short completion is timed in rounds, as ours are (``runner.rounds_for``)
    rounds = [warm["total_ms"]] + [
        complete(hole, prompt, settings.max_tokens)["total_ms"]
        for _ in range(rounds_for(len(warm["tokens"])) - 1)
    ]
    typed = pair.tokenizer.encode(typed_at_cursor(hole), add_special_tokens=False)
    keystroke = complete(hole, prompt + typed, 1)  # as our warm ttft
    record = dict(
        cold_ttft_ms=cold["ttft_ms"],
        ttft_ms=keystroke["ttft_ms"],
        total_ms=statistics.median(rounds),
        rounds_ms=rounds,
        tokens=len(warm["tokens"]),
        ids=warm["tokens"],
    )
    if warm.get("drafted"):  # the server's own count of drafted and accepted tokens
        record.update(drafted=warm["drafted"], accepted=warm["accepted"])
    return record


def run_peer(
    pair: LoadedPair,
    holes: list[Hole],
    rows: list[dict],
    settings: Settings,
    log=print,
    limit: int | None = None,
    server: Path | None = None,
) -> dict:
    path = str(gguf_file(pair.manifest.target, pair.manifest.install_hint))
    pairs = list(zip(holes, rows, strict=True))
    step = max(1, len(pairs) // limit) if limit else 1
    chosen = pairs[::step][:limit]  # spread over languages and kinds
    prompts = [prompt_ids(pair, hole, settings) for hole, _ in chosen]
    records: list[dict] = [
        {"file": row["hole"]["file"], "language": hole.language, "kind": hole.kind}
        for hole, row in chosen
    ]
    for key, opened in engines(pair, path, server):
        with opened() as complete:
            for record, (hole, _), prompt in zip(records, chosen, prompts, strict=True):
                record[key] = measure(complete, pair, hole, prompt, settings)
                log(
                    f"peer {NAMES[key]:<24} {hole.language:<15} {hole.kind:<8} "
                    f"{rate(record[key]):5.1f} tok/s"
                )
    for record, (_, row) in zip(records, chosen, strict=True):
        theirs = record.get("server_plain") or record.get("plain")
        record["plain_matches_ours"] = theirs is not None and theirs["ids"] == row["plain"]["ids"]
        for key, (greedy, match) in GREEDY_OF.items():
            if key in record:
                record[match] = record[key]["ids"] == record[greedy]["ids"]
    ours = [row for _, row in chosen]
    return dict(model=os.path.basename(path), holes=records, summary=summarize(records, ours))


def summarize(records: list[dict], ours: list[dict]) -> dict:
    """Per engine over the same holes: tokens/s and total time of the completion (prompt
    cached), time to first token after a keystroke and after a jump (cold)."""

    def p50(values: list[float]) -> float | None:
        return statistics.median(values) if values else None

    def figures(runs: list[dict], ttft: list[float], cold: list[float]) -> dict:
        ms = sum(r["total_ms"] for r in runs)
        return dict(
            tok_s=sum(r["tokens"] for r in runs) / ms * 1000 if ms else None,
            total_ms_p50=p50([r["total_ms"] for r in runs]),
            ttft_ms_p50=p50(ttft),
            cold_ttft_ms_p50=p50(cold),
        )

    out: dict = {}
    for key, name in NAMES.items():
        runs = [r[key] for r in records if key in r]
        if runs:
            ttft, cold = [r["ttft_ms"] for r in runs], [r["cold_ttft_ms"] for r in runs]
            out[name] = figures(runs, ttft, cold)
            accepted = [r for r in runs if r.get("drafted")]
            if accepted:  # the server's own acceptance over the holes it drafted on
                drafted = sum(r["drafted"] for r in accepted)
                out[name]["acceptance"] = sum(r["accepted"] for r in accepted) / drafted
    # ours: the keystroke and cold measurements are per hole (run once, speculative)
    ttft, cold = [r["ttft_ms"] for r in ours], [r["cold_ttft_ms"] for r in ours]
    out["codespec plain"] = figures([r["plain"] for r in ours], ttft, cold)
    out["codespec speculative"] = figures([r["spec"] for r in ours], ttft, cold)
    out["holes"] = len(records)
    out["llama.cpp plain matches codespec plain"] = sum(r["plain_matches_ours"] for r in records)
    for key, (_, match) in GREEDY_OF.items():
        if any(match in r for r in records):
            out[f"{NAMES[key]} matches its greedy"] = sum(r.get(match, False) for r in records)
    return out


def peer_lines(peer: dict, weights: str = "") -> list[str]:
    s = peer["summary"]
    ours = weights or "the same weights"
    lines = [
        f"Same {s['holes']} holes, prompt cached, greedy, same stop rules; llama.cpp on "
        f"`{peer['model']}` (Q4_K/Q6_K blocks, int8 activations in its dot products), "
        f"codespec on {ours}.",
        "",
    ]
    # every speed against llama-server's plain decoding, the engine llama.vim and llama.vscode
    # users run (llama-cpp-python's loop where no server ran)
    base = next((n for n in ("llama-server plain", "llama.cpp plain") if n in s), None)
    base_rate = s[base]["tok_s"] if base else None
    lines += [
        f"| engine | tok/s | x {base or 'peer'} | total p50 | ttft p50 (keystroke) "
        "| cold ttft p50 |",
        "|---|---|---|---|---|---|",
    ]
    order = ["llama-server plain", *NAMES.values(), "codespec plain", "codespec speculative"]
    for name in dict.fromkeys(order):
        if name not in s:
            continue
        r = s[name]
        times = ("total_ms_p50", "ttft_ms_p50", "cold_ttft_ms_p50")
        ms = [fmt(r.get(k), "{:.0f} ms") for k in times]
        ratio = r["tok_s"] / base_rate if base_rate and r.get("tok_s") else None
        lines.append(
            f"| {name} | {fmt(r['tok_s'], '{:.1f}')} | {fmt(ratio, '{:.2f}x')} | "
            + " | ".join(ms)
            + " |"
        )
    lines += [
        "",
        f"- llama.cpp greedy output identical to codespec's: "
        f"{s['llama.cpp plain matches codespec plain']} of {s['holes']} holes"
        + (
            "."
            if s["llama.cpp plain matches codespec plain"] == s["holes"]
            else " (other kernels or passes round differently: on torch, llama.cpp rounds "
            "activations to 8 bits in its dot products; on ggml the prompts are computed in "
            "other chunks, and with --exact codespec's padded rows take the GEMM kernel where a "
            "lone row takes the GEMV one)."
        ),
    ]
    if "llama.cpp prompt lookup matches its greedy" in s:
        lines.append(
            f"- llama.cpp prompt lookup output identical to its own greedy: "
            f"{s['llama.cpp prompt lookup matches its greedy']} of {s['holes']} holes."
        )
    if "llama-server draft model" in s:
        draft = s["llama-server draft model"]
        lines.append(
            "- llama-server (llama.cpp's own server, same llama.cpp) with the pair's draft GGUF at "
            "its default draft settings: output identical to its own greedy on "
            f"{s['llama-server draft model matches its greedy']} of {s['holes']} holes, "
            f"draft acceptance {fmt(draft.get('acceptance'), '{:.0%}')}."
        )
    return lines
