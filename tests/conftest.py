"""Shared fixtures: tiny random Qwen2 models built in the test (no downloads)."""

from __future__ import annotations

import contextlib
import importlib
import os
import tempfile
from pathlib import Path

import pytest
from helpers import GGML_MODULE, build_tiny_pair, tiny_qwen2

# Daemons the tests start record acceptance stats here, never in the user's state dir.
os.environ["CODESPEC_STATE_DIR"] = tempfile.mkdtemp(prefix="codespec-test-state-")

# A process loads one llama.cpp library (codespec/ggml/libraries.py). The suite's own process
# loads the one its ggml tests run on first (mainline, unless CODESPEC_TEST_LIBRARY says), so
# a pair it loads with --kernels auto stays on it whatever order the tests run in; the daemons
# the tests start choose for themselves, as a user's do.
with contextlib.suppress(ImportError, OSError):
    importlib.import_module(GGML_MODULE)


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
