"""A real OpenAI-compatible server for the remote-engine tests: llama-cpp-python's, on a tiny
random GGUF written here (with the real tokenizer), and a fault-injecting proxy before it."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import write_tiny_gguf
from remote_helpers import HAVE_SERVER, FaultProxy, start_llama_server


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
