"""`codespec bench --engine URL --concurrency 1,2,4,8`: the bench's holes as N editors at once
against a serving engine, and where the server's speculation stops paying.

Each editor takes its share of the holes and, for each, types like a person: a request at the
hole's start, then one per character of the removed text (``KEYSTROKES`` of them), each
cancelling the one before after ``KEY_INTERVAL_S`` (newest wins, as in the daemon), and lets
the last run to its end. Per concurrency level it reports time to first text over every request
that got some (p50/p95), whole-completion latency of the last requests (p50/p95), tokens/s per
stream and in total, the tokens streamed past a stop rule before the stream closed, and the
server's own speculation where it reports it (per request, or its
Prometheus counters before and after the level).

Given two engines (``--engine plain=URL --engine spec=URL``: the same model with its
speculation off and on), it prints the ratio per level and the first level at which the
speculating server is no faster.
"""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import PurePath

import httpx

from .. import machine
from ..completion import complete
from ..engine import StopSignal
from ..remote.config import RemoteConfig, from_table
from ..remote.metrics import ServerSpeculation, from_prometheus
from ..settings import Settings
from .corpus import Hole
from .inputs import BenchError, command_line
from .runner import bench_settings, cursor_of, options_for

KEYSTROKES = 3  # characters typed into each hole before its last request
KEY_INTERVAL_S = 0.12  # a brisk typist: each keystroke request lives this long at most


@dataclass
class LevelRun:
    """What one concurrency level measured."""

    first_ms: list[float] = field(default_factory=list)  # every request that streamed text
    total_ms: list[float] = field(default_factory=list)  # the last request of each hole
    stream_rates: list[float] = field(default_factory=list)  # tokens/s after the first text
    tokens: int = 0
    past_stop: int = 0  # tokens streamed after a stop rule fired, before the stream closed
    keystrokes_without_text: int = 0
    failed: int = 0
    server: ServerSpeculation = field(default_factory=lambda: ServerSpeculation(0, 0))
    wall_s: float = 0.0


def parse_engines(values: list[str]) -> list[tuple[str, RemoteConfig]]:
    """``label=URL`` or ``URL`` (labelled by its position) for each ``--engine``."""
    engines = []
    for i, value in enumerate(values):
        label, sep, url = value.partition("=")
        if not sep or "://" in label:
            label, url = f"engine {i + 1}", value
        # a benchmark waits for slow servers rather than give up on them (a CPU server's cold
        # prefill of a full prompt takes seconds, more when editors queue behind each other)
        table = {"url": url, "first_token_timeout_s": 300, "stall_timeout_s": 60}
        config = from_table({**table, "total_timeout_s": 600}, f"--engine {value}")
        assert config is not None
        engines.append((label, config))
    return engines


def parse_levels(value: str) -> list[int]:
    try:
        levels = sorted({int(part) for part in value.split(",") if part.strip()})
    except ValueError:
        raise ValueError(f"--concurrency wants numbers like 1,2,4,8, not {value!r}") from None
    if not levels or levels[0] < 1 or levels[-1] > 256:
        raise ValueError("--concurrency levels must be between 1 and 256")
    return levels


def run_level(pair, holes: list[Hole], editors: int, settings: Settings) -> LevelRun:
    """``editors`` threads, each typing into its share of the holes."""
    result = LevelRun()
    lock = threading.Lock()

    def editor(mine: list[Hole]) -> None:
        for hole in mine:
            type_into(pair, hole, settings, result, lock)

    shares = [holes[i::editors] for i in range(editors)]
    threads = [threading.Thread(target=editor, args=(share,)) for share in shares if share]
    t0 = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    result.wall_s = time.perf_counter() - t0
    return result


def type_into(pair, hole: Hole, settings: Settings, out: LevelRun, lock) -> None:
    path = PurePath(hole.file).name
    typed = hole.truth[:KEYSTROKES]
    for n in range(len(typed) + 1):
        last = n == len(typed)
        stop = StopSignal()
        first: list[float] = []
        t0 = time.perf_counter()

        def on_text(text: str, first=first) -> None:
            if not first:
                first.append(time.perf_counter())

        timer = None
        if not last:  # the next keystroke comes and supersedes this request
            timer = threading.Timer(KEY_INTERVAL_S, stop.cancel)
            timer.start()
        try:
            result = complete(
                pair,
                cursor_of(hole, typed[:n]),
                options_for(hole, settings),
                path=path,
                stop=stop,
                on_text=on_text,
            )
        except Exception:
            with lock:
                out.failed += 1
            continue
        finally:
            if timer is not None:
                timer.cancel()
        done = time.perf_counter()
        stats = result.stats
        with lock:
            if first:
                out.first_ms.append(1000 * (first[0] - t0))
            elif not last:
                out.keystrokes_without_text += 1
            if stats is not None and "server" in stats.proposed:
                out.server = out.server + ServerSpeculation(
                    stats.proposed["server"], stats.accepted["server"]
                )
            if stats is not None:
                out.past_stop += stats.dropped_past_stop
            if last and stats is not None:
                out.total_ms.append(1000 * (done - t0))
                out.tokens += stats.tokens
                if first and stats.tokens > 1:
                    out.stream_rates.append((stats.tokens - 1) / max(done - first[0], 1e-6))


def prometheus_snapshot(config: RemoteConfig) -> ServerSpeculation | None:
    """The server's speculation counters, where it has a Prometheus page (vLLM)."""
    try:
        reply = httpx.get(f"{config.urls[0]}/metrics", timeout=config.connect_timeout_s)
    except httpx.HTTPError:
        return None
    if reply.status_code != 200:
        return None
    try:
        return from_prometheus(reply.text)
    except ValueError:
        return None


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def level_figures(run: LevelRun, editors: int, counters: ServerSpeculation | None) -> dict:
    server = counters if counters is not None and counters.drafted else run.server
    return dict(
        editors=editors,
        requests=len(run.first_ms) + run.keystrokes_without_text,
        first_ms=dict(p50=pct(run.first_ms, 50), p95=pct(run.first_ms, 95)),
        total_ms=dict(p50=pct(run.total_ms, 50), p95=pct(run.total_ms, 95)),
        stream_tokens_per_s=statistics.fmean(run.stream_rates) if run.stream_rates else None,
        total_tokens_per_s=run.tokens / run.wall_s if run.wall_s else None,
        keystrokes_without_text=run.keystrokes_without_text,
        tokens_past_stop=run.past_stop,
        failed=run.failed,
        server_drafted=server.drafted,
        server_accepted=server.accepted,
        server_acceptance=server.rate,
    )


def run_engines(pair_name: str, engines, holes, levels, settings, log=print) -> dict:
    """Every engine at every level, one after another (never two at once: they would share the
    server machine's CPU or GPU)."""
    from ..runtime import load_remote_pair

    results: dict[str, list[dict]] = {}
    for label, config in engines:
        pair = load_remote_pair(config, pair_name, progress=log)
        results[label] = []
        try:
            for editors in levels:
                before = prometheus_snapshot(config)
                run = run_level(pair, holes, editors, settings)
                after = prometheus_snapshot(config)
                counters = None
                if before is not None and after is not None:
                    counters = ServerSpeculation(
                        after.drafted - before.drafted,
                        after.accepted - before.accepted,
                        after.steps - before.steps,
                    )
                figures = level_figures(run, editors, counters)
                results[label].append(figures)
                log(f"{label}: {editors} editors: {level_line(figures)}")
        finally:
            close = getattr(pair.engine, "close", None)  # (a remote engine's HTTP client)
            if close is not None:
                close()
    return dict(engines={label: c.describe() for label, c in engines}, levels=results)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def level_line(f: dict) -> str:
    rate = f["stream_tokens_per_s"]
    total = f["total_tokens_per_s"]
    spec = f["server_acceptance"]
    return (
        f"first text p50/p95 {_ms(f['first_ms']['p50'])}/{_ms(f['first_ms']['p95'])} ms, "
        f"whole p50/p95 {_ms(f['total_ms']['p50'])}/{_ms(f['total_ms']['p95'])} ms, "
        f"{'-' if rate is None else f'{rate:.1f}'} tok/s per stream, "
        f"{'-' if total is None else f'{total:.1f}'} tok/s in all"
        + ("" if spec is None else f", server acceptance {spec:.0%}")
        + (f", {f['keystrokes_without_text']} keystrokes without text")
        + (f", {f['tokens_past_stop']} tokens streamed past a stop")
        + (f", {f['failed']} failed" if f["failed"] else "")
    )


def table(result: dict) -> str:
    """The concurrency table; with two engines, their ratio per level and the verdict."""
    lines = []
    for label, description in result["engines"].items():
        lines.append(f"{label}: {description}")
        lines.append(
            f"{'editors':>7} {'first p50':>9} {'first p95':>9} {'whole p50':>9} "
            f"{'whole p95':>9} {'tok/s/stream':>12} {'tok/s all':>9} {'server acc':>10}"
        )
        for f in result["levels"][label]:
            rate, total, acc = (
                f["stream_tokens_per_s"],
                f["total_tokens_per_s"],
                f["server_acceptance"],
            )
            lines.append(
                f"{f['editors']:>7} {_ms(f['first_ms']['p50']):>9} {_ms(f['first_ms']['p95']):>9} "
                f"{_ms(f['total_ms']['p50']):>9} {_ms(f['total_ms']['p95']):>9} "
                f"{'-' if rate is None else f'{rate:.1f}':>12} "
                f"{'-' if total is None else f'{total:.1f}':>9} "
                f"{'-' if acc is None else f'{acc:.0%}':>10}"
            )
    if len(result["engines"]) == 2:
        lines += comparison(result)
    return "\n".join(lines)


def comparison(result: dict) -> list[str]:
    """Second engine against the first, per level: whole-completion p50 and tokens/s in all.
    Speculation pays at a level when the second (speculating) engine completes faster."""
    (a, levels_a), (b, levels_b) = result["levels"].items()
    lines = [f"{b} against {a} (whole-completion p50 ratio < 1 and tok/s ratio > 1: it pays)"]
    stops = None
    for fa, fb in zip(levels_a, levels_b, strict=True):
        pa, pb = fa["total_ms"]["p50"], fb["total_ms"]["p50"]
        ta, tb = fa["total_tokens_per_s"], fb["total_tokens_per_s"]
        latency = pb / pa if pa and pb else None
        throughput = tb / ta if ta and tb else None
        pays = latency is not None and latency < 1.0
        if not pays and stops is None:
            stops = fa["editors"]
        lines.append(
            f"{fa['editors']:>7} editors: whole p50 x{'-' if latency is None else f'{latency:.2f}'}"
            f", tok/s x{'-' if throughput is None else f'{throughput:.2f}'}"
        )
    lines.append(
        f"speculation stops paying at {stops} concurrent editors"
        if stops is not None
        else "speculation pays at every level measured"
    )
    return lines


def run_concurrency(args, holes, max_tokens: int, missing: list[str], log) -> dict:
    """``--engine``: the holes as concurrent editors against serving engines
    (``concurrency.py``); nothing runs locally but the tokenizer and the stop rules."""
    from ..remote.config import EngineConfigError

    try:
        engines = parse_engines(args.engine)
        levels = parse_levels(args.concurrency)
    except (EngineConfigError, ValueError) as exc:
        raise BenchError(str(exc)) from None
    log(f"{len(holes)} holes as {', '.join(map(str, levels))} concurrent editors")
    settings = bench_settings(max_tokens, prompt_seconds=0.0)
    if args.window_tokens:
        prefix, _, suffix = args.window_tokens.partition(",")
        if not (prefix.isdigit() and suffix.isdigit() and int(prefix) >= 16):
            raise BenchError("--window-tokens wants PREFIX,SUFFIX in tokens, like 256,64")
        settings = replace(settings, prefix_tokens=int(prefix), suffix_tokens=int(suffix))
    result = run_engines(args.pair, engines, holes, levels, settings, log=log)
    return dict(
        command=command_line(),
        machine=dict(cpu=machine.cpu_model(), cpu_kind=machine.cpu_kind()),
        concurrency=result,
        missing=missing,
        settings=dict(
            seed=args.seed,
            max_tokens=max_tokens,
            holes=len(holes),
            prefix_tokens=settings.prefix_tokens,
            suffix_tokens=settings.suffix_tokens,
        ),
    )
