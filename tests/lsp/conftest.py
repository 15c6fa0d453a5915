"""A real daemon with a tiny model, shared by the LSP tests (see lsp_helpers)."""

from __future__ import annotations

import pytest
from lsp_helpers import start_daemon


@pytest.fixture(scope="session")
def daemon(tiny_manifest):
    """The shared daemon; each target pass is slowed by 20 ms so cancellation is observable."""
    proc = start_daemon(tiny_manifest, "--test-pass-delay", "0.02", "--max-tokens", "40")
    yield proc
    proc.terminate()
    proc.wait(timeout=30)
