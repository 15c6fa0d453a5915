"""The daemon with the HTTP front that the HTTP tests share (``http_helpers``)."""

from __future__ import annotations

import pytest
from http_helpers import start_http_daemon


@pytest.fixture(scope="module")
def http_daemon(tiny_manifest, tmp_path_factory):
    daemon = start_http_daemon(tiny_manifest, tmp_path_factory.mktemp("http"))
    yield daemon
    daemon.proc.terminate()
    daemon.proc.wait(timeout=30)
