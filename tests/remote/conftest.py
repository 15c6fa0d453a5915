"""A real OpenAI-compatible server for the remote-engine tests: llama-cpp-python's, on a tiny
random GGUF written here (with the real tokenizer), and a fault-injecting proxy before it."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest
from fault_proxy import FaultProxy
from helpers import write_tiny_gguf

try:
    import llama_cpp.server  # noqa: F401

    HAVE_SERVER = True
except ImportError:  # scripts/setup.sh installs it; a machine that could not build it
    HAVE_SERVER = False

needs_server = pytest.mark.skipif(
    not HAVE_SERVER, reason="llama-cpp-python[server] is not installed (scripts/setup.sh)"
)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_llama_server(model: Path, *extra: str) -> tuple[subprocess.Popen, str]:
    """``python -m llama_cpp.server`` on a free loopback port, once it answers."""
    port = free_port()
    log = tempfile.NamedTemporaryFile(prefix="llama-server-", suffix=".log", delete=False)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(model),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--n_ctx",
            "4096",
            "--n_threads",
            "1",
            *extra,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"llama_cpp.server exited: {Path(log.name).read_text()[-2000:]}")
        try:
            if httpx.get(f"{url}/v1/models", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise TimeoutError("llama_cpp.server did not start")


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


@pytest.fixture(scope="session")
def llama_server(tiny_gguf):
    """The real server's base URL (shared: it loads in about a second)."""
    if not HAVE_SERVER:
        pytest.skip("llama-cpp-python[server] is not installed (scripts/setup.sh)")
    proc, url = start_llama_server(tiny_gguf)
    yield url
    proc.terminate()
    proc.wait(timeout=30)


@pytest.fixture
def proxy(tiny_gguf):
    """A fault proxy in ``pass`` mode before a server of its own: llama-cpp-python's server
    can stay busy with a stream its client closed while the proxy held it back (its send
    buffer full), and the next test must not wait for that."""
    if not HAVE_SERVER:
        pytest.skip("llama-cpp-python[server] is not installed (scripts/setup.sh)")
    proc, url = start_llama_server(tiny_gguf)
    p = FaultProxy(int(url.rsplit(":", 1)[1]))
    yield p
    p.close()
    proc.terminate()
    proc.wait(timeout=30)
