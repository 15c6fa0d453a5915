"""benchmarks/ggml_invariance.py on a tiny random GGUF: each configuration runs in a process of
its own, every width and cache size is checked, and a one-row pass equals the reference's
first row (the same pass twice gives the same bits, so a difference the harness reports is the
kernels'). The tiny model's float tensors take other kernels than the embedded model's Q4_K and
Q6_K ones (llamafile's sgemm for batches), and the gguf package cannot write K-quants, so which
configuration is exact for the real model is measured by the harness, not asserted here."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import write_tiny_gguf

pytest.importorskip("llama_cpp")

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "ggml_invariance.py"
EXACT = "repack=off tiled=off flash=on kv=q8_0"
OTHER = "repack=on tiled=force flash=on kv=q8_0"


def load():
    spec = importlib.util.spec_from_file_location("ggml_invariance", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_harness_checks_widths_against_one_row_decoding(tmp_path):
    # heads of 32 values: a q8_0 K/V cache needs whole 32-value blocks
    gguf = write_tiny_gguf(tmp_path / "tiny.gguf", hidden=128)
    out = tmp_path / "inv.json"
    run = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--gguf",
            str(gguf),
            "--configs",
            f"{EXACT},{OTHER}",
            "--reps",
            "1",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    results = json.loads(out.read_text())["results"]
    assert set(results) == {EXACT, OTHER}
    harness = load()
    for name, result in results.items():
        assert set(result["cached"]) == {str(c) for c in harness.CACHED}
        for widths in result["cached"].values():
            assert len(widths) == len(harness.WIDTHS)
            assert widths["1"]["rows_same"] == 1, name  # the same pass twice: the same bits
        assert set(result["ms_per_pass"]) == {str(w) for w in harness.TIMED_WIDTHS}
        assert set(result["tree"]) == {str(c) for c in harness.CACHED}
        assert all(0 <= t["nodes_same"] <= t["nodes"] == 5 for t in result["tree"].values())
    assert EXACT in run.stdout and "invariant" in run.stdout and "tree nodes off" in run.stdout


def test_an_unknown_configuration_is_one_line(tmp_path):
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--gguf", str(tmp_path / "none.gguf"), "--configs", "fast"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode != 0
    assert "unknown configuration 'fast'" in run.stderr


def test_the_verdict_counts_every_row_and_next_token_that_differs():
    harness = load()

    def width(rows_same, next_same=True):
        return dict(rows_same=rows_same, next_same=next_same)

    exact = {"cached": {"100": {"1": width(1), "2": width(2)}}}
    assert harness.verdict(exact) == (True, 0, 0)
    off = {"cached": {"100": {"1": width(1), "2": width(0, False)}, "600": {"3": width(2)}}}
    assert harness.verdict(off) == (False, 3, 1)
