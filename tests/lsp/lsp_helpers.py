"""Helpers for the daemon tests: a tiny model pair, starting a daemon, waiting for its socket.

The tiny model has random weights but the real Qwen2.5-Coder tokenizer (copied from the prepared
default pair), so text goes through the real tokenization path while a target pass costs
milliseconds.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest_lsp
from helpers import build_tiny_pair, free_port, wait_for_socket  # noqa: F401  (re-exported)
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

# One runtime dir for the whole test session: `codespec lsp` finds the daemon's socket there.
RUNTIME = Path(tempfile.mkdtemp(prefix="codespec-test-run-"))
os.environ["CODESPEC_RUNTIME_DIR"] = str(RUNTIME)
SOCKET = RUNTIME / "codespec.sock"
LSP_COMMAND = [sys.executable, "-m", "codespec", "lsp"]


def wait_for_model(proc, timeout: float = 180.0) -> None:
    """Until the daemon's background load has finished (its log says so): a test that
    measures the daemon's memory must not count the model arriving."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        log = proc.log_path.read_text()
        if "model ready" in log or "model failed to load" in log:
            return
        if proc.poll() is not None:
            raise RuntimeError(f"the daemon exited: {log[-2000:]}")
        time.sleep(0.1)
    raise TimeoutError("the daemon's model did not load")


def start_daemon(
    manifest: Path,
    *extra: str,
    socket_path: Path = SOCKET,
    env: dict | None = None,
    wait: bool = True,
):
    """A daemon process; its log goes to a file (``proc.log_path``): a pipe nobody reads
    would fill up and block the daemon on its next log line."""
    log_path = Path(tempfile.mkstemp(prefix="codespec-daemon-", suffix=".log")[1])
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "codespec",
            "serve",
            "--socket",
            str(socket_path),
            "--pair",
            str(manifest),
            "--no-status",
            *extra,
        ],
        stdout=subprocess.DEVNULL,
        stderr=log_path.open("w"),
        env=env,
    )
    proc.log_path = log_path
    if wait:
        wait_for_socket(socket_path)
    return proc


def start_tcp_daemon(manifest: Path, folder: Path, env: dict | None = None):
    """A daemon on a free loopback port too, once it accepts there: (process, port)."""
    port = free_port()
    proc = start_daemon(manifest, "--tcp", str(port), socket_path=folder / "d.sock", env=env)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)
    return proc, port


def lsp_client_fixture(settings: dict):
    """A pytest-lsp client through `codespec lsp` to the shared daemon, initialized with
    ``settings``; the `codespec/partialCompletion` notifications it gets are kept in
    ``partials``. Assign it at module level, with the shared daemon asked for first:

        client = lsp_client_fixture(SETTINGS)
        pytestmark = pytest.mark.usefixtures("daemon")

    (pytest-lsp starts the relay before it asks for the fixture's own arguments: a relay that
    finds no daemon starts one of its own, with the embedded pair, and the shared daemon then
    finds its socket taken)."""

    @pytest_lsp.fixture(config=ClientServerConfig(server_command=LSP_COMMAND))
    async def client(lsp_client: LanguageClient, daemon):
        lsp_client.partials = []

        @lsp_client.feature("codespec/partialCompletion")
        def on_partial(params):
            lsp_client.partials.append(params)

        await lsp_client.initialize_session(
            types.InitializeParams(
                capabilities=types.ClientCapabilities(),
                initialization_options=settings,
                process_id=None,
            )
        )
        yield
        await lsp_client.shutdown_session()

    return client
