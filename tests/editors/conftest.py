"""Fixtures of the editor tests: a private daemon socket."""

from __future__ import annotations

import os
import signal

import pytest


@pytest.fixture
def daemon_socket(tmp_path):
    """A private socket for `codespec lsp --socket`; the daemon it starts is stopped afterwards."""
    socket_path = tmp_path / "d.sock"
    yield socket_path
    lock = socket_path.with_name(socket_path.name + ".lock")
    if lock.exists() and (pid := lock.read_text().strip()):
        try:
            os.kill(int(pid), signal.SIGTERM)
        except (ProcessLookupError, ValueError):
            pass
