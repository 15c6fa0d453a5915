"""The two llama.cpp libraries (``codespec/ggml/libraries.py``) and the choice between them
(``codespec/library_choice.py``): the ggml backend's own tests pass on ik_llama.cpp too, one process
never loads both, and ``auto`` prices each library once per machine in child processes.

The ggml tests run on ik_llama.cpp in a pytest process of their own (``CODESPEC_TEST_LIBRARY``),
since this one has mainline loaded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import write_tiny_gguf

from codespec import library_choice
from codespec.ggml.libraries import installed

ROOT = Path(__file__).resolve().parent.parent
needs_both = pytest.mark.skipif(
    not (installed("llama.cpp") and installed("ik_llama.cpp")),
    reason="needs llama-cpp-python and ik-llama-cpp-python (scripts/setup.sh installs both)",
)


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    path = tmp_path_factory.mktemp("libraries") / "tiny-q4.gguf"
    return write_tiny_gguf(path, hidden=128, quantized=True, live_tokens=range(1000, 1006))


def run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, **env},
        timeout=300,
    )


@needs_both
def test_the_ggml_backend_tests_pass_on_ik_llama_cpp():
    """Trees, parked cells, places saved as bytes, look-ahead, cancels and the trimmed draft:
    every ggml test, run again on ik_llama.cpp's kernels ("fast == naive" on that backend)."""
    files = [
        "tests/engine/test_ggml_backend.py",
        "tests/engine/test_ggml_lookahead.py",
        "tests/engine/test_trimmed_vocab.py",
    ]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *files],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "CODESPEC_TEST_LIBRARY": "ik_llama.cpp"},
        timeout=1200,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and " skipped" not in done.stdout.splitlines()[-1]


@needs_both
def test_one_process_never_loads_both_libraries():
    code = (
        "from codespec.ggml.libraries import open_library, LibraryError\n"
        "open_library('{first}')\n"
        "try:\n"
        "    open_library('{second}')\n"
        "except LibraryError as exc:\n"
        "    print('refused:', exc)\n"
    )
    for first, second in (("llama.cpp", "ik_llama.cpp"), ("ik_llama.cpp", "llama.cpp")):
        done = run_python(code.format(first=first, second=second))
        assert done.returncode == 0, done.stderr
        assert f"refused: {first} is loaded in this process already" in done.stdout
    # importing the binding (as reading a GGUF's metadata does) counts as loading it
    done = run_python(
        code.replace("open_library('{first}')", "import llama_cpp").format(second="ik_llama.cpp")
    )
    assert "refused: llama.cpp is loaded" in done.stdout


def test_the_pass_price_child_prints_one_json_line(tiny_gguf):
    done = subprocess.run(
        [sys.executable, "-m", "codespec.ggml.pass_prices", str(tiny_gguf), "--widths", "1,4"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout)
    assert figures["library"] == "llama.cpp" and set(figures["ms"]) == {"1", "4"}
    assert all(ms > 0 for ms in figures["ms"].values())
    bad = subprocess.run(
        [sys.executable, "-m", "codespec.ggml.pass_prices", str(tiny_gguf), "--widths", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "--widths" in bad.stderr.splitlines()[-1]


@needs_both
def test_auto_prices_each_library_once_and_then_reads_the_figures(tiny_gguf, tmp_path, monkeypatch):
    monkeypatch.setenv("CODESPEC_CACHE_DIR", str(tmp_path))
    # (this process has mainline loaded, which a choice here must keep: ask as a new process,
    # with nothing loaded, would; the pricing itself runs in child processes)
    assert library_choice.choose_library("auto", tiny_gguf, "t" * 16, False, print) == ("llama.cpp")
    monkeypatch.setattr(library_choice, "loaded", lambda: None)
    notes: list[str] = []
    first = library_choice.choose_library("auto", tiny_gguf, "tiny" * 4, False, notes.append)
    prices = library_choice.cached("tiny" * 4)
    assert prices is not None and set(prices) == {"llama.cpp", "ik_llama.cpp"}
    assert first == library_choice.cheapest(prices)
    assert any("timing the kernel libraries" in n for n in notes)
    notes.clear()
    again = library_choice.choose_library("auto", tiny_gguf, "tiny" * 4, False, notes.append)
    assert again == first and notes == []


def test_exact_rows_and_explicit_choices(tiny_gguf, tmp_path, monkeypatch):
    monkeypatch.setenv("CODESPEC_CACHE_DIR", str(tmp_path))
    quiet: list[str] = []
    assert library_choice.choose_library("auto", tiny_gguf, "k" * 16, True, quiet.append) == (
        "llama.cpp"
    )
    assert library_choice.choose_library("llama.cpp", tiny_gguf, "k" * 16, False, quiet.append)
    assert quiet == []  # nothing measured
    with pytest.raises(Exception, match="--kernels must be one of"):
        library_choice.choose_library("ik", tiny_gguf, "k" * 16, False, quiet.append)
    if installed("ik_llama.cpp"):
        with pytest.raises(Exception, match="--exact runs on llama.cpp"):
            library_choice.choose_library("ik_llama.cpp", tiny_gguf, "k" * 16, True, print)


def test_damaged_figures_are_measured_again(tmp_path, monkeypatch):
    monkeypatch.setenv("CODESPEC_CACHE_DIR", str(tmp_path))
    path = library_choice.verdict_file("d" * 16)
    path.parent.mkdir(parents=True)
    for text in ("{", "[]", '{"x": 1}', json.dumps({"fp": {"llama.cpp": {"1": -1}}})):
        path.write_text(text)
        assert library_choice.cached("d" * 16) is None


@needs_both
def test_a_process_running_ik_reads_gguf_metadata_in_a_child(tiny_gguf):
    """Reading a GGUF's metadata goes through mainline llama.cpp; a process running
    ik_llama.cpp (a daemon listing models) reads it in a child, never loading mainline."""
    done = run_python(
        "import sys\n"
        "from codespec.ggml.libraries import open_library\n"
        "from codespec.models.gguf_info import read_gguf_info\n"
        "open_library('ik_llama.cpp')\n"
        f"info = read_gguf_info({str(tiny_gguf)!r})\n"
        "print(info.architecture, info.layers, info.tokens.fim_prefix)\n"
        "print('mainline loaded:', 'llama_cpp' in sys.modules)\n"
    )
    assert done.returncode == 0, done.stderr
    assert "mainline loaded: False" in done.stdout
    here = __import__("codespec.models.gguf_info", fromlist=["read_gguf_info"])
    info = here.read_gguf_info(tiny_gguf)  # (this process runs mainline: read in process)
    assert (
        done.stdout.splitlines()[0] == f"{info.architecture} {info.layers} {info.tokens.fim_prefix}"
    )
