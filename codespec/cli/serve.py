"""``codespec serve``: the daemon in the foreground, and the remote engine it may decode on."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .common import (
    Subparsers,
    UsageError,
    add_model_options,
    model_choice,
    note,
    number_in,
    pair_of,
    path_text,
    setting_value,
)


def next_edit_model_of(args: argparse.Namespace):
    """``--next-edit-model``, else the settings file's ``[next_edit] model``: its pair (no draft:
    a next edit's draft is the window itself), or None for the completion model."""
    from ..models.user_models import manifest_for_model
    from ..server.config import next_edit_table

    config = Path(args.config) if args.config else None
    try:
        name = args.next_edit_model or next_edit_table(config)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if name is None:
        return None
    return manifest_for_model(name, model_choice(args).folders, use_draft=False)


def add_parser(sub: Subparsers) -> None:
    s = sub.add_parser("serve", help="run the daemon in the foreground")
    s.add_argument(
        "--socket",
        type=path_text,
        default=None,
        help="unix socket path (default: user runtime dir)",
    )
    s.add_argument(
        "--tcp",
        type=number_in(int, 1, 65535),
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
    s.add_argument(
        "--http",
        default=None,
        metavar="[HOST:]PORT",
        help="also answer llama-server's /infill and OpenAI's /v1/completions over HTTP "
        "(127.0.0.1 unless a host is given; see docs/http.md)",
    )
    s.add_argument(
        "--api-key-file",
        type=path_text,
        default=None,
        metavar="FILE",
        help="the HTTP front's API key (a 0600 file); required off loopback",
    )
    s.add_argument("--draft", choices=["auto", "on", "off"], default="auto")
    s.add_argument(
        "--config", type=path_text, default=None, help="settings TOML (default: user config dir)"
    )
    s.add_argument("--max-tokens", type=setting_value("max_tokens"), default=None)
    s.add_argument("--no-status", action="store_true", help="no live status line")
    s.add_argument(
        "--stats-db",
        type=path_text,
        default=None,
        metavar="FILE",
        help="acceptance store (default: state dir)",
    )
    s.add_argument("--no-stats", action="store_true", help="record no acceptance stats")
    s.add_argument(
        "--stats-retention-days",
        type=number_in(float, 0.01, 36500),
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
    s.add_argument("--engine-model", type=path_text, default=None, help="the server's model name")
    s.add_argument(
        "--next-edit-model",
        type=path_text,
        default=None,
        metavar="NAME|PATH",
        help="a model of your own for next edits (a GGUF in Sweep's next-edit format, e.g. "
        "sweep-next-edit-0.5B), run here beside the one serving completions (default: the "
        "settings file's [next_edit] model, else the completion model itself)",
    )
    s.add_argument(
        "--engine-token-file",
        type=path_text,
        default=None,
        metavar="FILE",
        help="API token (a 0600 file)",
    )
    # a model switch hands the listening socket and its lock to the new program (switching.py)
    s.add_argument("--listening-fds", default=None, help=argparse.SUPPRESS)
    s.add_argument(
        "--test-pass-delay", type=number_in(float, 0, 60), default=0.0, help=argparse.SUPPRESS
    )
    s.add_argument(
        "--test-load-delay", type=number_in(float, 0, 3600), default=0.0, help=argparse.SUPPRESS
    )
    s.add_argument("--test-stats-max-pages", type=int, default=None, help=argparse.SUPPRESS)
    add_model_options(s)


def run(args: argparse.Namespace) -> int:
    import asyncio
    import ipaddress
    import logging
    from dataclasses import replace

    from ..printable import PrintableFormatter
    from ..server.config import load_file
    from ..server.endpoint import (
        DaemonRunning,
        EndpointError,
        TokenError,
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
    http_address = http_listen_address(args)
    logging.basicConfig(level=logging.INFO)
    for handler in logging.getLogger().handlers:  # (model files and clients name things)
        handler.setFormatter(PrintableFormatter("%(asctime)s %(name)s: %(message)s"))
    logging.getLogger("pygls").setLevel(logging.WARNING)  # it logs every message, code included
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request to a remote engine
    settings, problems = load_file(Path(args.config) if args.config else None)
    for problem in problems:
        note(problem)
    if args.max_tokens is not None:
        settings = replace(settings, max_tokens=args.max_tokens)
    try:  # the socket first: nothing is opened or loaded for a daemon that cannot listen
        socket_path = Path(args.socket) if args.socket else default_socket()
    except EndpointError as exc:
        raise UsageError(str(exc)) from None
    inherited = None
    if args.listening_fds is not None:  # run again by a model switch: the socket is ours
        import socket

        from ..server.switching import parse_fds

        socket_fd, lock = parse_fds(args.listening_fds)
        inherited = socket.socket(fileno=socket_fd)
    else:
        lock = claim(socket_path)
        if lock is None:
            return 1
    from ..generator import SlowedGenerator
    from ..runtime import LoadOptions  # (the model's stack: only once the socket is ours)
    from ..server.daemon import Daemon, run_daemon

    store = None
    if not args.no_stats:
        from ..stats.store import Store

        store = Store(
            Path(args.stats_db) if args.stats_db else None,
            args.stats_retention_days,
            max_pages=args.test_stats_max_pages,  # testing aid: a disk that fills up
        )
    remote = remote_engine(args)
    if remote is not None and args.model:
        raise UsageError("--model runs a model here; with --engine the server's model decodes")
    # (a model that cannot run is one line now, not an error at the first request)
    model = pair_of(args) if remote is None else args.pair
    if remote is not None:
        from ..remote.config import plain_http_warnings
        from ..runtime import load_remote_pair

        for warning in plain_http_warnings(remote):
            note(warning)

        def load():
            return load_remote_pair(remote, args.pair, progress=note)
    else:

        def load():
            return LoadOptions.from_args(args).load(model, note)

    next_edit_model = next_edit_model_of(args)
    if next_edit_model is not None:
        load_completions = load

        def load():
            pair = load_completions()
            alone = LoadOptions(draft_mode="off", exact=args.exact, kernels=args.kernels)
            pair.next_edit = alone.load(next_edit_model, note, use_draft=False)
            note(f"next edits run on {pair.next_edit.model_label}")
            return pair

    if args.test_pass_delay:
        load_at_full_speed = load

        def load():
            pair = load_at_full_speed()
            pair.engine = SlowedGenerator(pair.engine, args.test_pass_delay)
            return pair

    daemon = Daemon(
        load,
        settings,
        load_delay_s=args.test_load_delay,
        store=store,
        remote=remote is not None,
    )
    daemon.argv = sys.argv[1:]  # (a model switch runs it again with another model's flags)
    daemon.model_folders = model_choice(args).folders
    try:
        token = read_or_create_token() if args.tcp is not None else None
    except TokenError as exc:
        raise UsageError(f"not serving TCP: {exc}") from None
    http = http_front(args, http_address) if http_address is not None else None
    try:
        asyncio.run(
            run_daemon(
                daemon,
                socket_path,
                args.tcp,
                args.host,
                token,
                status=not args.no_status,
                lock=lock,
                http=http,
                inherited=inherited,
            )
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


def claim(socket_path: Path) -> int | None:
    """The socket's lock, taken before the model's stack is imported: of many daemons started
    at once (every editor window after a crash), one pays for it and the rest leave at once
    (None: another daemon serves it)."""
    from ..server.endpoint import DaemonRunning, EndpointError, check_socket_path, claim_socket

    try:
        socket_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        check_socket_path(socket_path)
        return claim_socket(socket_path)
    except DaemonRunning as exc:
        print(f"codespec: {exc}", file=sys.stderr)
        return None
    except EndpointError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"cannot use {socket_path.parent}: {exc.strerror or exc}") from None


def http_listen_address(args: argparse.Namespace):
    """Where ``--http`` listens (None: it was not asked for); off loopback only with a key."""
    if args.http is None:
        if args.api_key_file is not None:
            raise UsageError("--api-key-file is the HTTP front's key: it needs --http")
        return None
    from ..server.http.listen import AddressError, parse_address

    try:
        address = parse_address(args.http)
    except AddressError as exc:
        raise UsageError(str(exc)) from None
    if not address.loopback and args.api_key_file is None:
        raise UsageError(f"refusing to serve HTTP on {address.host} without --api-key-file")
    return address


def http_front(args: argparse.Namespace, address):
    """(the bound socket, who may use it) for ``run_daemon``: bound now, so that a port in
    use is one line before the model loads."""
    from ..remote.config import EngineConfigError, read_token
    from ..server.http.app import LOOPBACK_NAMES, Admission
    from ..server.http.listen import bind

    key = None
    if args.api_key_file is not None:
        try:
            key = read_token(args.api_key_file, what="--api-key-file")
        except EngineConfigError as exc:
            raise UsageError(str(exc)) from None
    try:
        sock = bind(address)
    except OSError as exc:
        raise UsageError(f"cannot listen on {address}: {exc.strerror or exc}") from None
    hosts = frozenset(LOOPBACK_NAMES) if address.loopback else None
    return sock, Admission(hosts, key)


def remote_engine(args: argparse.Namespace):
    """The remote engine ``serve`` decodes on, if any: ``--engine`` flags first, then the
    settings file's ``[engine]`` table, then the pair manifest's; None to decode here."""
    from ..models import load_manifest
    from ..remote.config import EngineConfigError, from_table
    from ..server.config import engine_table

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
        configured, where = engine_table(Path(args.config) if args.config else None)
        if configured is not None:
            return from_table(configured, where)
        manifest = load_manifest(args.pair)
        if manifest.engine:
            return from_table(manifest.engine, f"{manifest.path} [engine]")
    except EngineConfigError as exc:
        raise UsageError(str(exc)) from None
    return None
