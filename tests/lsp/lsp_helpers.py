"""Helpers for the daemon tests: a tiny model pair, starting a daemon, waiting for its socket.

The tiny model has random weights but the real Qwen2.5-Coder tokenizer (copied from the prepared
default pair), so text goes through the real tokenization path while a target pass costs
milliseconds.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# One runtime dir for the whole test session: `codespec lsp` finds the daemon's socket there.
RUNTIME = Path(tempfile.mkdtemp(prefix="codespec-test-run-"))
os.environ["CODESPEC_RUNTIME_DIR"] = str(RUNTIME)
SOCKET = RUNTIME / "codespec.sock"
LSP_COMMAND = [sys.executable, "-m", "codespec", "lsp"]


def build_tiny_pair(folder: Path) -> Path:
    """Save a tiny random Qwen2 with the real tokenizer, and a pair manifest pointing at it."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from codespec.models import load_manifest, resolve_source

    default = load_manifest()
    real = resolve_source(default.target, default.install_hint, progress=lambda m: None)
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=151936,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        tie_word_embeddings=False,
    )
    model = Qwen2ForCausalLM(config)
    with torch.no_grad():
        model.model.embed_tokens.weight.normal_(0.0, 1.0)  # varied output, not an echo
        model.lm_head.weight.mul_(2.0)
        model.lm_head.weight[151643:] = 0.0  # special tokens never win: completions run long
    model_dir = folder / "tiny"
    model.save_pretrained(str(model_dir), safe_serialization=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(real / name, model_dir / name)
    tokens = default.tokens
    stop = ", ".join(f'"{t}"' for t in tokens.stop)
    manifest = folder / "tiny.toml"
    manifest.write_text(
        f'name = "tiny"\n[target]\nsource = "hf-dir"\nlabel = "tiny-test"\npath = "{model_dir}"\n'
        f'[dtype]\ncpu = "float32"\n'
        f'[tokens]\nfim_prefix = "{tokens.fim_prefix}"\nfim_suffix = "{tokens.fim_suffix}"\n'
        f'fim_middle = "{tokens.fim_middle}"\nrepo_name = "{tokens.repo_name}"\n'
        f'file_sep = "{tokens.file_sep}"\nstop = [{stop}]\n'
    )
    return manifest


def wait_for_socket(path: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(str(path))
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"no daemon on {path}")


def start_daemon(manifest: Path, *extra: str, socket_path: Path = SOCKET):
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "codespec",
            "serve",
            "--socket",
            str(socket_path),
            "--pair",
            str(manifest),
            "--no-status",
            *extra,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    wait_for_socket(socket_path)
    return proc
