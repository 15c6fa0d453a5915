"""Shared fixtures: tiny random Qwen2 models built in the test (no downloads)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from helpers import build_tiny_pair, tiny_qwen2

# Daemons the tests start record acceptance stats here, never in the user's state dir.
os.environ["CODESPEC_STATE_DIR"] = tempfile.mkdtemp(prefix="codespec-test-state-")


@pytest.fixture(scope="session")
def target_model():
    return tiny_qwen2(seed=0)


@pytest.fixture(scope="session")
def other_model():
    """A different random model with the same vocabulary: a draft that is often wrong."""
    return tiny_qwen2(seed=1, hidden=32)


@pytest.fixture(scope="session")
def tiny_manifest(tmp_path_factory) -> Path:
    """A pair manifest for a tiny random model with the real tokenizer (see helpers)."""
    return build_tiny_pair(tmp_path_factory.mktemp("tinypair"))
