"""Complete one benchmark hole the way the product does, plain and speculative, side by side.

For each hole, on the resident pair:

1. cold: a request at a new cursor (the cache holds the previous hole's prompt), one token:
   the full prefill, i.e. the time to first token after a jump to another place;
2. plain and speculative greedy decoding on the same warm cache, in alternating order, with the
   stop rules on: their outputs are compared token by token, their speeds as a ratio. A short
   completion takes a few passes, and one pass's noise (``docs/benchmarks.md``, "Measurements
   behind the code") would swing its ratio as much: completions under ``ROUND_TOKENS`` tokens
   are timed in up to ``MAX_ROUNDS`` rounds, each from the speculation policy's state before
   the first (the same decisions, probes included), and their median times kept;
3. warm: the user types one to three characters of the removed text at the cursor; the cached
   prompt is extended (KV reuse) and the time to first token measured.
"""

from __future__ import annotations

import copy
import resource
import statistics
import sys
from dataclasses import replace
from pathlib import PurePath
from typing import Any

import numpy as np
from rapidfuzz.distance import Levenshtein

from ..completion import CompletionOptions, CompletionResult, complete, prompt_at
from ..engine import GenerationStats
from ..languages import LANGUAGES, has_syntax_error
from ..runtime import LoadedPair
from ..settings import Settings, completion_options
from ..stops import Cursor, Mode
from .corpus import Hole, check_no_leak


def bench_settings(max_tokens: int, **changes) -> Settings:
    """The daemon's settings (its window limits, sized to its time budget), with the bench's
    token limit for both kinds of completion; nothing is computed ahead (each hole is timed
    alone)."""
    defaults = Settings(max_tokens=max_tokens, line_max_tokens=max_tokens, warm_ahead=False)
    return replace(defaults, **changes)


def mode_of(hole: Hole) -> Mode:
    """Rest-of-line holes are single-line completions; the other kinds multi-line."""
    return Mode.LINE if hole.kind == "line" else Mode.BLOCK


def options_for(hole: Hole, settings: Settings, **changes) -> CompletionOptions:
    """The options ``complete`` gets for ``hole`` (its mode: ``mode_of``)."""
    own: dict[str, Any] = {"mode": mode_of(hole), **changes}  # (a caller may force another)
    return completion_options(settings, False, **own)


def cursor_of(hole: Hole, typed: str = "") -> Cursor:
    """The document split at the hole, with ``typed`` already typed at the cursor."""
    return Cursor(hole.prefix + typed, hole.suffix, LANGUAGES[hole.language])


def prompt_ids(pair: LoadedPair, hole: Hole, settings: Settings) -> list[int]:
    """The FIM prompt ``complete`` builds for the hole, by tokenizing alone (no model pass)."""
    path = PurePath(hole.file).name
    return prompt_at(pair, cursor_of(hole), options_for(hole, settings), path)[0]


def run_hole(pair: LoadedPair, hole: Hole, settings: Settings, spec_first: bool) -> dict:
    cursor = cursor_of(hole)
    path = PurePath(hole.file).name

    def run(**changes) -> CompletionResult:
        return complete(pair, cursor, options_for(hole, settings, **changes), path=path)

    cold = run(max_tokens=1, line_max_tokens=1)
    if cold.anchor is None:
        raise ValueError(f"no completion is made at {hole.file}:{hole.start} (mode none)")
    prompt = cold.anchor.ids
    check_no_leak(hole, *prompt_texts(pair, prompt))

    engine = pair.local
    decisions_before = dict(engine.policy.decisions)
    first: dict[str, CompletionResult] = {}
    start = copy.deepcopy(engine.policy)  # (replaced below by the speculative run's own start)
    for speculate in (True, False) if spec_first else (False, True):
        if speculate:
            start = copy.deepcopy(engine.policy)  # what the speculative run starts from
        first["spec" if speculate else "plain"] = run(speculate=speculate)
    spec, plain = first["spec"], first["plain"]
    decisions = {k: v - decisions_before.get(k, 0) for k, v in engine.policy.decisions.items()}
    rounds, learned = [first], engine.policy
    for i in range(1, rounds_for(stats_of(plain).tokens)):
        again: dict[str, CompletionResult] = {}
        for speculate in (True, False) if spec_first == (i % 2 == 0) else (False, True):
            engine.policy = copy.deepcopy(start)  # the first speculative run's situation
            again["spec" if speculate else "plain"] = run(speculate=speculate)
        rounds.append(again)
    engine.policy = learned  # the next hole sees what one round taught it

    warm = complete(
        pair,
        cursor_of(hole, typed_at_cursor(hole)),
        options_for(hole, settings, max_tokens=1, line_max_tokens=1),
        path=path,
        anchor=spec.anchor,
    )

    exact = all(r["spec"].tokens == r["plain"].tokens == plain.tokens for r in rounds)
    return dict(
        hole=hole.describe(),
        prompt_tokens=len(prompt),
        cold_ttft_ms=1000 * stats_of(cold).ttft_s,
        ttft_ms=1000 * stats_of(warm).ttft_s,
        warm_prefill_tokens=stats_of(warm).prefill_tokens,
        spec=run_record(spec, [r["spec"] for r in rounds]),
        plain=run_record(plain, [r["plain"] for r in rounds]),
        draft_decisions=decisions,
        exact=exact,
        **divergence(None if exact else divergence_gap(pair, prompt, plain, spec)),
        completion=spec.text,
        **quality(hole, spec.text),
    )


def typed_at_cursor(hole: Hole) -> str:
    """What the user types next in the warm measurement: 1-3 characters of the removed text."""
    return hole.truth.split("\n", 1)[0][: 1 + hole.line % 3]


# completions shorter than this many tokens are timed in several rounds (see the docstring)
ROUND_TOKENS = 32
MAX_ROUNDS = 5


def rounds_for(tokens: int) -> int:
    """How many rounds a completion of ``tokens`` tokens is timed in: enough for about
    ``ROUND_TOKENS`` tokens in all, at most ``MAX_ROUNDS``."""
    return max(1, min(MAX_ROUNDS, -(-ROUND_TOKENS // max(tokens, 1))))


def stats_of(result: CompletionResult) -> GenerationStats:
    """A hole's counters (a hole is cut where a completion is made: the model always runs)."""
    if result.stats is None:
        raise ValueError("no model ran for this hole (mode none)")
    return result.stats


def run_record(result: CompletionResult, rounds: list[CompletionResult] | None = None) -> dict:
    """One mode's figures for a hole: the first round's counts and the median time of all
    rounds (``rounds``, the first included; just ``result`` when None)."""
    s = stats_of(result)
    times = [1000 * stats_of(r).total_s for r in rounds or [result]]
    return dict(
        tokens=s.tokens,
        passes=s.target_passes + 1,  # the first token comes from the prefill pass
        total_ms=statistics.median(times),
        rounds_ms=times,
        ttft_ms=1000 * s.ttft_s,
        # the first round's decode passes: their widths, and each one's time
        pass_widths=[width for width, _, _ in s.pass_log],
        pass_ms=[round(1000 * seconds, 2) for _, _, seconds in s.pass_log],
        # the policy's bets: [first token's predicted rate, predicted mean and variance of the
        # tokens kept, tokens kept] (``GenerationStats.bets``)
        bets=[[round(x, 4) for x in bet[:3]] + [bet[3]] for bet in s.bets],
        proposed=dict(s.proposed),
        accepted=dict(s.accepted),
        draft_passes=s.draft_passes,
        threads=s.threads,
        stop_reason=s.stop_reason,
        ids=result.tokens,
    )


def prompt_texts(pair: LoadedPair, prompt: list[int]) -> tuple[str, str]:
    """The prefix and suffix text the model sees, read back from the prompt's tokens."""
    fim = pair.manifest.tokens
    text = pair.tokenizer.decode(prompt)
    after_prefix = text.rsplit(fim.fim_prefix, 1)[1]
    prefix, rest = after_prefix.split(fim.fim_suffix, 1)
    return prefix, rest.split(fim.fim_middle, 1)[0]


def normalize(text: str) -> str:
    """Compare code up to trailing whitespace on lines and blank lines at the ends."""
    return "\n".join(line.rstrip() for line in text.strip("\n").split("\n")).strip()


def quality(hole: Hole, completion: str) -> dict:
    """How close the completion is to the removed text, and whether the file still parses."""
    got, want = normalize(completion), normalize(hole.truth)
    return dict(
        exact_match=got == want,
        edit_similarity=Levenshtein.normalized_similarity(got, want),
        parse_ok=has_syntax_error(LANGUAGES[hole.language], hole.prefix + completion + hole.suffix)
        is False,
    )


def divergence_gap(
    pair: LoadedPair, prompt: list[int], plain: CompletionResult, spec: CompletionResult
) -> tuple[float, float]:
    """The target's top-2 logit gap where the two outputs first differ (a one-token pass, as
    plain decoding runs it): on the cache as the runs left it, then after a fresh prefill of
    the same ids. A near-tie in both means a pass's width decided the token by rounding, not a
    wrong acceptance; a large gap on the cache that a fresh prefill does not show means the
    cache held something the ids do not explain (the report shows both)."""
    a, b = plain.tokens, spec.tokens
    first = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), min(len(a), len(b)))
    target = pair.local.target
    cached, _, _ = target.prefill(prompt + a[:first])
    target.reset()  # (the next hole is a new place: its first run prefills anyway)
    fresh, _, _ = target.prefill(prompt + a[:first])
    return top_two_gap(cached), top_two_gap(fresh)


def divergence(gaps: tuple[float, float] | None) -> dict:
    cached, fresh = gaps if gaps is not None else (None, None)
    return dict(divergence_logit_gap=cached, divergence_fresh_gap=fresh)


def top_two_gap(logits: np.ndarray) -> float:
    top = np.sort(logits)[-2:]
    return float(top[1] - top[0])


def current_rss_mb() -> float | None:
    try:
        for line in open("/proc/self/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def peak_memory_mb() -> dict:
    """Peak and current resident memory of this process (and the GPU's peak when there is
    one)."""
    peak = {
        "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "rss_now_mb": current_rss_mb(),
    }
    torch = sys.modules.get("torch")  # (a CPU daemon on ggml never imports it)
    if torch is not None and torch.cuda.is_available():
        peak["cuda_mb"] = torch.cuda.max_memory_allocated() / 2**20
    return peak
