"""Command line: ``codespec complete PATH:LINE:COL``, ``prepare``, ``serve``, ``lsp``, ``bench``.

Bad input gets one line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from pathlib import Path

from .files import MAX_DOCUMENT_BYTES, FileError, read_text
from .models import DEFAULT_PAIR, ModelError

EXIT_USAGE = 2
DIGITS = re.compile(r"[0-9]{1,9}")
DEVICE = re.compile(r"cpu|mps|cuda(:[0-9]{1,3})?")
# flags that set a setting: checked by the setting's own limits (server/config.py)
SETTING_FLAGS = ("max_tokens", "prefix_tokens", "suffix_tokens")


class UsageError(Exception):
    """Bad input from the user: reported as one line, exit status 2."""


def parse_location(spec: str) -> tuple[Path, int, int]:
    """``PATH:LINE:COL`` (1-based) -> (path, 0-based line, 0-based column). LINE and COL are
    ASCII digits only (``int`` would also take " 1", "+1" and other scripts' digits)."""
    parts = spec.rsplit(":", 2)
    if len(parts) != 3 or not all(DIGITS.fullmatch(p) for p in parts[1:]):
        raise UsageError(f"expected PATH:LINE:COL with 1-based numbers, got {spec!r}")
    path, line_no, col_no = parts[0], int(parts[1]), int(parts[2])
    if line_no < 1 or col_no < 1:
        raise UsageError(f"line and column are 1-based, got {line_no}:{col_no}")
    return Path(path), line_no - 1, col_no - 1


def _add_model_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pair", default=DEFAULT_PAIR, help="model pair name or manifest path")
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:1 ... (default: cuda if any)")
    p.add_argument(
        "--quantize",
        choices=["auto", "off", "int4", "int8", "w8a8"],
        default=None,
        help="CPU weights: auto (the pair's choice: int4/int8 for GGUF pairs, kernels measured "
        "on this machine), off (dense bf16/fp32), int4, int8 (weight-only), w8a8 (int8 weights "
        "and activations)",
    )
    p.add_argument(
        "--backend",
        choices=["auto", "ggml", "torch"],
        default=None,
        help="what runs the model on a CPU: ggml (llama.cpp's kernels on the GGUF files), torch; "
        "auto (default): whichever this machine measured faster (once), ggml only where "
        "llama-cpp-python is installed and no --quantize is given",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="codespec", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    c = sub.add_parser("complete", help="complete a file at a position, streaming to stdout")
    c.add_argument("location", help="PATH:LINE:COL, 1-based; COL counts characters")
    c.add_argument("--json", action="store_true", help="print one JSON object instead")
    c.add_argument("--no-spec", action="store_true", help="plain decoding (no speculation)")
    c.add_argument("--max-tokens", type=int, default=128)
    c.add_argument("--temperature", type=float, default=0.0)
    c.add_argument("--seed", type=int, default=None)
    c.add_argument(
        "--draft",
        choices=["auto", "on", "off"],
        default="auto",
        help="draft model: adaptive (default), always, never",
    )
    c.add_argument(
        "--mode",
        choices=["auto", "line", "block"],
        default="auto",
        help="how much to complete (default: decided by the syntax at the cursor)",
    )
    c.add_argument(
        "--no-stop-rules",
        action="store_true",
        help="no syntax-aware stop rules: stop only at end-of-text or --max-tokens",
    )
    c.add_argument("--language", default=None, help="language id (default: from the extension)")
    c.add_argument("--prefix-tokens", type=int, default=1024)
    c.add_argument("--suffix-tokens", type=int, default=256)
    _add_model_options(c)

    p = sub.add_parser("prepare", help="join, verify and convert a pair's weights (once)")
    _add_model_options(p)

    s = sub.add_parser("serve", help="run the daemon in the foreground")
    s.add_argument("--socket", default=None, help="unix socket path (default: user runtime dir)")
    s.add_argument(
        "--tcp",
        type=int,
        default=None,
        metavar="PORT",
        help="also listen on TCP (127.0.0.1; clients must send the token)",
    )
    s.add_argument("--host", default="127.0.0.1", help="TCP address (loopback unless allowed)")
    s.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow a non-loopback --host (the token is still required)",
    )
    s.add_argument("--draft", choices=["auto", "on", "off"], default="auto")
    s.add_argument("--config", default=None, help="settings TOML (default: user config dir)")
    s.add_argument("--max-tokens", type=int, default=None)
    s.add_argument("--no-status", action="store_true", help="no live status line")
    s.add_argument(
        "--stats-db", default=None, metavar="FILE", help="acceptance store (default: state dir)"
    )
    s.add_argument("--no-stats", action="store_true", help="record no acceptance stats")
    s.add_argument(
        "--stats-retention-days",
        type=float,
        default=90,
        metavar="DAYS",
        help="delete stats rows older than this (default 90)",
    )
    s.add_argument(
        "--engine",
        action="append",
        default=None,
        metavar="URL",
        help="decode on this OpenAI-compatible server (repeat for failover; see docs/remote.md)",
    )
    s.add_argument("--engine-model", default=None, help="the server's model name")
    s.add_argument(
        "--engine-token-file", default=None, metavar="FILE", help="API token (a 0600 file)"
    )
    s.add_argument("--test-pass-delay", type=float, default=0.0, help=argparse.SUPPRESS)
    s.add_argument("--test-load-delay", type=float, default=0.0, help=argparse.SUPPRESS)
    s.add_argument("--test-stats-max-pages", type=int, default=None, help=argparse.SUPPRESS)
    _add_model_options(s)

    lsp = sub.add_parser("lsp", help="LSP over stdio for editors (starts the daemon if needed)")
    lsp.add_argument("--socket", default=None)
    lsp.add_argument(
        "--tcp",
        type=int,
        default=None,
        metavar="PORT",
        help="connect to a daemon on 127.0.0.1:PORT instead of the socket",
    )
    lsp.add_argument("--pair", default=None, help="model pair for a daemon this starts")
    lsp.add_argument(
        "--reply-deadline",
        type=float,
        default=None,
        metavar="S",
        help="answer a request the daemon leaves unanswered this long with an error (default: 300)",
    )

    st = sub.add_parser("stats", help="acceptance and speculation figures per language")
    st.add_argument("--since", default="all", help="a span like 7d, 12h, 30m (default: all)")
    st.add_argument("--language", default=None, help="only this languageId")
    st.add_argument("--by", choices=["language", "kind", "day", "context"], default="language")
    st.add_argument("--json", action="store_true", help="every figure as JSON")
    st.add_argument("--html", default=None, metavar="FILE", help="write a self-contained page")
    st.add_argument("--db", default=None, metavar="FILE", help="the store (default: state dir)")
    st.add_argument("--socket", default=None, help="the daemon's socket (asked when it runs)")

    fg = sub.add_parser(
        "forget", help="delete the accepted completions the workspace drafter learned from"
    )
    fg.add_argument(
        "--db",
        default=None,
        metavar="FILE",
        help="the stats store they sit beside (default: state dir)",
    )

    b = sub.add_parser("bench", help="speed, speculation and quality on holes cut from real code")
    b.add_argument("--quick", action="store_true", help="a small fixed subset (minutes, for CI)")
    b.add_argument("--languages", default=None, help="comma-separated (default: all)")
    b.add_argument("--kinds", default=None, help="comma-separated of line,block,function,copy")
    b.add_argument("--per-kind", type=int, default=2, help="holes per language and kind")
    b.add_argument("--max-tokens", type=int, default=48, help="new tokens per completion at most")
    b.add_argument(
        "--prompt-seconds",
        type=float,
        default=None,
        help="size prompt windows to a cold prefill of this long, as the daemon does "
        "(default: the daemon's 2.5 s); 0: fixed 1024 / 256 token windows",
    )
    b.add_argument("--seed", type=int, default=1, help="the holes are sampled from this seed")
    b.add_argument("--draft", choices=["auto", "on", "off"], default="auto")
    b.add_argument("--json", default=None, metavar="FILE", help="write every figure here")
    b.add_argument("--write-docs", action="store_true", help="regenerate the docs section")
    b.add_argument("--docs", default="docs/benchmarks.md", help="the docs file to regenerate")
    b.add_argument("--docs-from", default=None, metavar="FILE", help="docs from a saved JSON")
    b.add_argument("--fetch", action="store_true", help="download the npm/Debian sources first")
    b.add_argument(
        "--repo",
        action="store_true",
        help="holes that need other files of their package: in-file context against workspace "
        "context, side by side (--per-kind holes per language)",
    )
    b.add_argument(
        "--repo-lines",
        type=int,
        default=1,
        metavar="N",
        help="with --repo: each hole is the rest of its line and the N-1 lines after it",
    )
    b.add_argument(
        "--holes-from", default=None, metavar="FILE", help="rerun the holes of a saved JSON"
    )
    b.add_argument("--corpus-dir", default=None, help="where fetched sources live")
    b.add_argument("--peer", choices=["llama.cpp"], default=None, help="also run a peer")
    b.add_argument(
        "--peer-server",
        default=None,
        metavar="PATH",
        help="with --peer: also run llama.cpp's own llama-server binary at PATH, plain and with "
        "its draft-model speculation on the pair's draft",
    )
    b.add_argument(
        "--background-load",
        type=int,
        default=0,
        metavar="N",
        help="run N CPU-bound processes beside the measurement (a busy machine)",
    )
    b.add_argument(
        "--engine",
        action="append",
        default=None,
        metavar="[LABEL=]URL",
        help="replay the holes against this server as concurrent editors (twice: compare)",
    )
    b.add_argument(
        "--concurrency", default="1,2,4,8", help="editors at once, with --engine (default 1,2,4,8)"
    )
    b.add_argument(
        "--window-tokens",
        default=None,
        metavar="PREFIX,SUFFIX",
        help="prompt window limits in tokens (default 1024,256, the daemon's)",
    )
    b.add_argument(
        "--peer-holes", type=int, default=None, help="run the peer on N holes, spread out"
    )
    _add_model_options(b)
    return parser


def cmd_prepare(args: argparse.Namespace) -> int:
    """Prepare the form the chosen backend runs: the GGUF files and the tokenizer for ggml,
    quantized tensors for torch on the CPU, bf16 on a GPU."""
    from .models import (
        choose_device,
        gguf_file,
        load_manifest,
        quantize_mode,
        resolve_source,
        tokenizer_folder,
    )
    from .runtime import choose_backend, prepared_form

    manifest = load_manifest(args.pair)
    device = choose_device(args.device)
    if choose_backend(manifest, device, args.backend, args.quantize, _note) == "ggml":
        tokenizer_folder(manifest.target, manifest.install_hint, progress=_note)
        for src in (manifest.target, manifest.draft):
            if src is not None:
                print(f"{src.label}: {gguf_file(src, manifest.install_hint)}")
        return 0
    mode = quantize_mode(manifest, device, args.quantize)
    for src in (manifest.target, manifest.draft):
        if src is not None:
            form = prepared_form(src, mode)
            folder = resolve_source(src, manifest.install_hint, progress=_note, form=form)
            print(f"{src.label}: {folder}")
    return 0


def _note(message: str) -> None:
    print(f"codespec: {message}", file=sys.stderr, flush=True)


def cmd_complete(args: argparse.Namespace) -> int:
    from .prompt import split_at

    path, line, col = parse_location(args.location)
    try:
        text = read_text(path, MAX_DOCUMENT_BYTES)
    except FileError as exc:
        raise UsageError(str(exc)) from None
    try:
        prefix, suffix = split_at(text, line, col)
    except ValueError as exc:
        raise UsageError(str(exc)) from None

    from .completion import CompletionOptions, complete
    from .languages import language_for
    from .runtime import load_pair
    from .stops import Cursor, Mode

    pair = load_pair(
        args.pair,
        device=args.device,
        draft_mode=args.draft,
        progress=_note,
        quantize=args.quantize,
        backend=args.backend,
    )
    options = CompletionOptions(
        max_tokens=args.max_tokens,
        line_max_tokens=args.max_tokens,
        temperature=args.temperature,
        seed=args.seed,
        speculate=not args.no_spec,
        stop_rules=not args.no_stop_rules,
        mode=None if args.mode == "auto" else Mode(args.mode),
        invoked=True,  # the user asked explicitly
        prefix_tokens=args.prefix_tokens,
        suffix_tokens=args.suffix_tokens,
    )
    cursor = Cursor(prefix, suffix, language_for(args.language, str(path)))
    printed = ""

    def stream(text_so_far: str) -> None:
        nonlocal printed
        if not args.json and text_so_far.startswith(printed):
            sys.stdout.write(text_so_far[len(printed) :])
            sys.stdout.flush()
            printed = text_so_far

    result = complete(pair, cursor, options, path=path.name, on_text=stream)
    if args.json:
        print(json.dumps(completion_report(result, pair), ensure_ascii=False))
    elif result.text.startswith(printed):
        sys.stdout.write(result.text[len(printed) :] + "\n")
    else:  # shaping trimmed what was streamed (a duplicated bracket, a broken line): show it
        sys.stdout.write(f"\n--- final completion ---\n{result.text}\n")
    return 0


def completion_report(result, pair) -> dict:
    """The ``--json`` object: the completion and the per-request counters."""
    stats = result.stats
    if stats is None:  # no completion at this position: nothing ran
        from .engine import GenerationStats

        stats = GenerationStats(stop_reason="mode_none")
    return {
        "completion": result.text,
        "mode": result.mode.value,
        "prompt_tokens": result.prompt_tokens,
        "tokens": stats.tokens,
        "target_passes": stats.target_passes,
        "tokens_per_pass": round(stats.tokens_per_pass, 3),
        "proposed": dict(stats.proposed),
        "accepted": dict(stats.accepted),
        "draft_passes": stats.draft_passes,
        "prefill_tokens": stats.prefill_tokens,
        "cached_tokens": stats.cached_tokens,
        "stop_reason": stats.stop_reason,
        "dropped_past_stop": stats.dropped_past_stop,
        "ttft_ms": round(stats.ttft_s * 1000, 1),
        "total_ms": round(stats.total_s * 1000, 1),
        "load_ms": round(pair.load_s * 1000, 1),
        "device": pair.device,
        "dtype": pair.dtype,
        "model": pair.model_label,
        "draft_model": pair.manifest.draft.label if pair.manifest.draft else None,
    }


def cmd_serve(args: argparse.Namespace) -> int:
    import asyncio
    import ipaddress
    import logging
    from dataclasses import replace

    from .server.config import load_file
    from .server.endpoint import (
        DaemonRunning,
        EndpointError,
        TokenError,
        check_socket_path,
        default_socket,
        read_or_create_token,
    )

    if args.tcp is not None:
        try:
            loopback = args.host == "localhost" or ipaddress.ip_address(args.host).is_loopback
        except ValueError:
            raise UsageError(f"--host must be an IP address, got {args.host!r}") from None
        if not loopback and not args.allow_remote:
            raise UsageError(f"refusing to listen on {args.host}: pass --allow-remote to do so")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("pygls").setLevel(logging.WARNING)  # it logs every message, code included
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request to a remote engine
    settings, problems = load_file(Path(args.config) if args.config else None)
    for problem in problems:
        _note(problem)
    if args.max_tokens is not None:
        settings = replace(settings, max_tokens=args.max_tokens)
    try:  # the socket first: nothing is opened or loaded for a daemon that cannot listen
        socket_path = Path(args.socket) if args.socket else default_socket()
        check_socket_path(socket_path)
    except EndpointError as exc:
        raise UsageError(str(exc)) from None
    from .runtime import load_pair  # (the model's stack: only once the socket is known good)
    from .server.daemon import Daemon, run_daemon

    store = None
    if not args.no_stats:
        from .stats.store import Store

        store = Store(
            Path(args.stats_db) if args.stats_db else None,
            args.stats_retention_days,
            max_pages=args.test_stats_max_pages,  # testing aid: a disk that fills up
        )
    remote = remote_engine(args)
    if remote is not None:
        from .remote.config import plain_http_warnings
        from .runtime import load_remote_pair

        for warning in plain_http_warnings(remote):
            _note(warning)

        def load():
            return load_remote_pair(remote, args.pair, progress=_note)
    else:

        def load():
            return load_pair(
                args.pair,
                device=args.device,
                draft_mode=args.draft,
                progress=_note,
                quantize=args.quantize,
                backend=args.backend,
            )

    daemon = Daemon(
        load,
        settings,
        pass_delay_s=args.test_pass_delay,
        load_delay_s=args.test_load_delay,
        store=store,
    )
    try:
        token = read_or_create_token() if args.tcp is not None else None
    except TokenError as exc:
        raise UsageError(f"not serving TCP: {exc}") from None
    try:
        asyncio.run(
            run_daemon(daemon, socket_path, args.tcp, args.host, token, status=not args.no_status)
        )
    except DaemonRunning as exc:
        print(f"codespec: {exc}", file=sys.stderr)
        return 1
    except EndpointError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:  # a TCP port in use or not allowed
        where = f"{args.host}:{args.tcp}" if args.tcp is not None else str(socket_path)
        raise UsageError(f"cannot listen on {where}: {exc.strerror or exc}") from None
    return 0


def remote_engine(args: argparse.Namespace):
    """The remote engine ``serve`` decodes on, if any: ``--engine`` flags first, then the
    settings file's ``[engine]`` table, then the pair manifest's; None to decode here."""
    from .models import load_manifest
    from .remote.config import EngineConfigError, from_table
    from .server.config import engine_table

    try:
        if args.engine:
            table: dict = {"kind": "remote", "urls": args.engine}
            if args.engine_model:
                table["model"] = args.engine_model
            if args.engine_token_file:
                table["token_file"] = args.engine_token_file
            return from_table(table, "--engine")
        if args.engine_model or args.engine_token_file:
            raise UsageError("--engine-model and --engine-token-file need --engine URL")
        table, where = engine_table(Path(args.config) if args.config else None)
        if table is not None:
            return from_table(table, where)
        manifest = load_manifest(args.pair)
        if manifest.engine:
            return from_table(manifest.engine, f"{manifest.path} [engine]")
    except EngineConfigError as exc:
        raise UsageError(str(exc)) from None
    return None


def cmd_stats(args: argparse.Namespace) -> int:
    from .daemon_client import ask_stats
    from .stats.cli import run

    return run(args, ask_daemon=ask_stats)


def cmd_forget(args: argparse.Namespace) -> int:
    """Delete the accepted-completions file; a running daemon notices and forgets its copy."""
    from .stats.store import default_path
    from .workspace.accepted import FILE_NAME, forget

    path = (Path(args.db) if args.db else default_path()).parent / FILE_NAME
    try:
        removed = forget(path)
    except OSError as exc:
        raise UsageError(f"cannot delete {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    print(
        f"forgot the accepted completions in {path}" if removed else f"nothing to forget: no {path}"
    )
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from .bench.main import main as bench_main

    return bench_main(args)


def cmd_lsp(args: argparse.Namespace) -> int:
    from .server.endpoint import EndpointError, TokenError, default_socket
    from .server.relay import REPLY_DEADLINE_S, Relay, connect, connect_or_start

    deadline = REPLY_DEADLINE_S if args.reply_deadline is None else args.reply_deadline
    if not 0 < deadline <= 86400:  # (nan and inf fail this too)
        raise UsageError(f"--reply-deadline must be between 0 and 86400 seconds, not {deadline}")

    if args.tcp is not None:
        address = ("127.0.0.1", args.tcp)

        def connect_fn():
            return connect(None, address)
    else:
        try:
            socket_path = Path(args.socket) if args.socket else default_socket()
        except EndpointError as exc:
            raise UsageError(str(exc)) from None
        daemon_args = ["--pair", args.pair] if args.pair else []

        def connect_fn():
            return connect_or_start(socket_path, daemon_args)

    try:
        relay = Relay(connect_fn, sys.stdin.buffer, sys.stdout.buffer, reply_deadline_s=deadline)
    except (OSError, TimeoutError) as exc:
        raise UsageError(f"cannot reach the codespec daemon: {exc}") from None
    except TokenError as exc:
        raise UsageError(f"cannot authenticate to the daemon: {exc}") from None
    except EndpointError as exc:
        raise UsageError(str(exc)) from None
    return relay.run()


COMMANDS = {
    "complete": cmd_complete,
    "prepare": cmd_prepare,
    "serve": cmd_serve,
    "lsp": cmd_lsp,
    "bench": cmd_bench,
    "stats": cmd_stats,
    "forget": cmd_forget,
}


def check_flags(args: argparse.Namespace) -> None:
    """Every flag checked before anything is loaded, each failure one line."""
    from .server import config

    for name in SETTING_FLAGS:
        if (value := getattr(args, name, None)) is not None:
            try:
                config.check(name, value)
            except ValueError as exc:
                raise UsageError(f"--{name.replace('_', '-')} {exc}") from None
    device = getattr(args, "device", None)
    if device is not None and not DEVICE.fullmatch(device):
        raise UsageError(f"--device must be cpu, cuda, cuda:N or mps, not {device!r}")
    _in_range(args, "temperature", 0, 10)
    _in_range(args, "stats_retention_days", 0.01, 36500)
    _in_range(args, "test_pass_delay", 0, 60)
    _in_range(args, "test_load_delay", 0, 3600)
    _in_range(args, "tcp", 1, 65535)
    _in_range(args, "per_kind", 1, 10000)
    _in_range(args, "repo_lines", 1, 40)
    _in_range(args, "peer_holes", 1, 100000)
    _in_range(args, "background_load", 0, 64)


def _in_range(args: argparse.Namespace, name: str, low: float, high: float) -> None:
    value = getattr(args, name, None)
    if value is None:
        return
    if not (math.isfinite(value) and low <= value <= high):  # nan fails isfinite
        flag = "--" + name.replace("_", "-")
        raise UsageError(f"{flag} must be from {low:g} to {high:g}, not {value}")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        check_flags(args)
        return COMMANDS[args.command](args)
    except (UsageError, ModelError) as exc:
        print(f"codespec: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("codespec: interrupted", file=sys.stderr)
        return 130
