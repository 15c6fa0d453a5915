"""llama.cpp's own server as the bench's peer (``bench/peer_server.py``), run for real on tiny
GGUF files written here: its greedy tokens through our stop rules, as the in-process peer gets
them, and its draft-model speculation. Needs a ``llama-server`` binary built from llama.cpp
(``CODESPEC_LLAMA_SERVER``, on the PATH, or where ``scripts/build-llama-server.sh`` puts it)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import write_tiny_gguf

from codespec.bench import peer, peer_server
from codespec.bench.corpus import Hole
from codespec.models import ModelError, load_manifest

BUILT = sorted(
    Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").glob(
        "codespec/llama-server/*/build/bin/llama-server"
    )
)
SERVER = (
    os.environ.get("CODESPEC_LLAMA_SERVER")
    or shutil.which("llama-server")
    or (str(BUILT[-1]) if BUILT else None)
)
needs_binary = pytest.mark.skipif(
    not SERVER, reason="no llama-server binary (scripts/build-llama-server.sh builds one)"
)
PREFIX = "def add(a, b):\n    total = a + b\n    return total\n\n\nvalue = "
HOLE = Hole("python", "line", "p", "f.py", "0" * 64, len(PREFIX), len(PREFIX), 6, 8,
            PREFIX, "", "\n")  # fmt: skip


@pytest.fixture(scope="module")
def tokenizer(tiny_manifest):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(load_manifest(str(tiny_manifest)).target.path)


def test_a_path_that_is_not_a_binary_is_one_line(tmp_path):
    with pytest.raises(ModelError, match="not an executable llama-server"):
        peer_server.check_binary(str(tmp_path / "nothing"))
    (tmp_path / "text").write_text("not a program")
    with pytest.raises(ModelError, match="not an executable llama-server"):
        peer_server.check_binary(str(tmp_path / "text"))


@needs_binary
def test_server_greedy_is_llama_cpps_greedy_through_our_stop_rules(tmp_path, tokenizer):
    from llama_cpp import Llama

    target = write_tiny_gguf(tmp_path / "target.gguf", quantized=True, live_tokens=range(0, 400))
    stop_ids = {151643}
    prompt = tokenizer.encode(PREFIX, add_special_tokens=False)
    binary = peer_server.check_binary(SERVER)
    with peer_server.server_variant(binary, target, [], tokenizer, stop_ids) as complete:
        first = complete(HOLE, prompt, 24)
        again = complete(HOLE, prompt, 24)  # the prompt cached this time
    llm = Llama(model_path=str(target), n_ctx=512, verbose=False)
    try:
        pair = SimpleNamespace(tokenizer=tokenizer, stop_ids=stop_ids)
        expected = peer.generate(llm, pair, HOLE, prompt, 24)
    finally:
        llm.close()
    assert first["tokens"] == again["tokens"] == expected["tokens"]
    assert 0 < len(first["tokens"]) <= 24
    # a line hole: the stop rule ended it at the line's end, whatever the model went on with
    assert "\n" not in tokenizer.decode(first["tokens"]).rstrip("\n")
    assert 0 < first["ttft_ms"] <= first["total_ms"]


@needs_binary
def test_the_draft_model_variant_speculates_with_the_draft_it_was_given(tmp_path, tokenizer):
    target = write_tiny_gguf(tmp_path / "target.gguf", quantized=True, live_tokens=range(0, 400))
    prompt = tokenizer.encode(PREFIX, add_special_tokens=False)
    binary = peer_server.check_binary(SERVER)
    (plain_args,) = peer_server.variants(None).values()
    draft_args = peer_server.variants(target)["draft_model"]  # the target drafting for itself
    assert plain_args == [] and str(target) in draft_args
    hole = Hole("python", "block", "p", "f.py", "0" * 64, 0, 0, 1, 0, PREFIX, "", "")
    with peer_server.server_variant(binary, target, [], tokenizer, set()) as complete:
        plain = complete(hole, prompt, 32)
    with peer_server.server_variant(binary, target, draft_args, tokenizer, set()) as complete:
        drafted = complete(hole, prompt, 32)
    assert drafted["tokens"] == plain["tokens"] and len(plain["tokens"]) == 32
    # the stream ran to its limit, so its last event reported the server's own counts
    assert drafted["drafted"] > 0 and drafted["accepted"] / drafted["drafted"] > 0.5
    assert plain["drafted"] is None


def test_a_server_that_cannot_start_is_one_line(tmp_path, tokenizer):
    fake = tmp_path / "llama-server"
    fake.write_text("#!/bin/sh\necho 'error: no such model' >&2\nexit 3\n")
    fake.chmod(0o755)
    with pytest.raises(ModelError, match="llama-server exited \\(3\\): error: no such model"):
        with peer_server.server_variant(fake, Path("nothing.gguf"), [], tokenizer, set()):
            pass
