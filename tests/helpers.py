"""Test helpers: tiny random Qwen2 models built in the test (no downloads), naive decoding."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import time
from pathlib import Path

import torch

from codespec.engine import StopSignal

# Which llama.cpp library the ggml tests load: the suite runs on mainline, and
# tests/test_kernel_libraries.py runs the ggml tests again in a process of their own on
# ik_llama.cpp (one process loads one of them: ``codespec/ggml/libraries.py``).
GGML_LIBRARY = os.environ.get("CODESPEC_TEST_LIBRARY", "llama.cpp")
GGML_MODULE = {"llama.cpp": "llama_cpp", "ik_llama.cpp": "ik_llama_cpp"}[GGML_LIBRARY]


def wait_for_socket(path: Path, timeout: float = 60.0) -> None:
    """Until a daemon accepts on the unix socket ``path``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(str(path))
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"no daemon on {path}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tiny_qwen2(seed: int, vocab: int = 96, hidden: int = 64, layers: int = 2, **config):
    """A randomly initialised Qwen2-architecture causal LM, small enough for fast CPU tests
    (``config``: more Qwen2Config fields)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    return _tiny(Qwen2Config, Qwen2ForCausalLM, seed, vocab, hidden, layers, **config)


def tiny_llama(seed: int, vocab: int = 96, hidden: int = 64, layers: int = 2):
    """The same, of the Llama architecture."""
    from transformers import LlamaConfig, LlamaForCausalLM

    return _tiny(LlamaConfig, LlamaForCausalLM, seed, vocab, hidden, layers)


def _tiny(config_class, model_class, seed, vocab, hidden, layers, **more):
    torch.manual_seed(seed)
    config = config_class(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        tie_word_embeddings=False,
        attn_implementation="sdpa",
        **more,
    )
    model = model_class(config).eval()
    with torch.no_grad():  # wider embeddings than the default init: varied, loop-prone output
        model.model.embed_tokens.weight.normal_(0.0, 1.0)
        model.lm_head.weight.mul_(2.0)
    return model


def as_w8a8(model: torch.nn.Module) -> torch.nn.Module:
    """``model``'s weights quantized as the loader stores them (int4 where the shape allows,
    else int8) and run by the w8a8 kernel (int8 weights and activations, integer sums; two-digit
    inputs where the daemon uses them), float32 between layers: the CPU default."""
    from codespec.quant import kernels
    from codespec.quant.load import build_quantized, quantize_dense

    plan = kernels.KernelPlan(dtype="float32", forced="w8a8")
    weights = quantize_dense(model.float().state_dict())
    return build_quantized(
        model.config, weights, torch.float32, plan.kernel_for, digits_for=plan.digits_for
    )


def naive_greedy(model, prompt: list[int], n: int, stop_ids=()) -> list[int]:
    """Reference decoding: no cache, no speculation, full forward pass per token."""
    ids = list(prompt)
    out: list[int] = []
    with torch.no_grad():
        for _ in range(n):
            logits = model(torch.tensor([ids])).logits[0, -1]
            token = int(torch.argmax(logits))
            if token in stop_ids:
                break
            out.append(token)
            ids.append(token)
    return out


# Qwen's chat format, as its instruct models' templates write it (without their tool calls)
CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def build_tiny_pair(folder: Path) -> Path:
    """Save a tiny random Qwen2 with the real Qwen2.5-Coder tokenizer (copied from the prepared
    default pair: text goes through the real tokenization path while a target pass costs
    milliseconds), and a pair manifest pointing at it."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from codespec.models import load_manifest, resolve_source

    default = load_manifest()
    real = resolve_source(  # the CPU's prepared form (the tokenizer files are the same)
        default.target, default.install_hint, progress=lambda m: None, form="quantized"
    )
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
    config = json.loads((model_dir / "tokenizer_config.json").read_text())
    config["chat_template"] = CHATML  # (an instruct model's: /v1/chat/completions serves it)
    (model_dir / "tokenizer_config.json").write_text(json.dumps(config))
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


class PreemptAfter(StopSignal):
    """A stop signal whose passes are told to stop once they have asked ``calls`` times (a
    request elsewhere came while a pass ran)."""

    def __init__(self, calls: int) -> None:
        super().__init__()
        self.calls = calls
        self.asked = 0

    def stops_pass(self, prefill_rows: int | None = None) -> bool:
        self.asked += 1
        return self.asked > self.calls


class CancelAfter(StopSignal):
    """A stop signal cancelled (keeping the chunk, as by a request at the same place) while
    work runs: the first ``checks`` times it is asked whether it is cancelled, it is not."""

    def __init__(self, checks: int) -> None:
        super().__init__()
        self.checks = checks
        self.asked = 0

    @property
    def cancelled(self) -> bool:
        self.asked += 1
        if self.asked > self.checks:
            self.cancel(keep_chunk=True)
        return super().cancelled


def write_tiny_gguf(
    path: Path,
    hidden: int = 64,
    layers: int = 2,
    seed: int = 0,
    quantized: bool = False,
    live_tokens: range | None = None,
    split_max_tensors: int = 0,
    name: str | None = None,
) -> Path:
    """A tiny random Qwen2 as a GGUF file (the ``gguf`` package writes it), with the real
    Qwen2.5-Coder tokenizer copied from the embedded GGUF: a real llama.cpp server loads it in
    a second, its tokens are the real vocabulary's and a pass costs a millisecond. Special
    tokens' output weights are zero, so it rarely ends early (completions run to their limit).

    ``quantized``: the matrices in 4-bit blocks (Q4_0) and the output matrix in 8-bit ones
    (Q8_0), the nearest the ``gguf`` package writes to the real model's Q4_K/Q6_K (it cannot
    write K-quants), so that llama.cpp runs its quantized (and repacked) kernels on them.
    ``live_tokens``: the only tokens it predicts (the others' output weights are zero), so that
    its text repeats as a small vocabulary's does and n-gram lookup finds spans in it.
    ``split_max_tensors``: written as a split model of parts holding that many tensors each
    (``NAME-00001-of-0000N.gguf``, as ``llama-gguf-split`` names them); the first is returned.
    ``name``: its ``general.name``."""
    import numpy as np
    from gguf import GGUFReader, GGUFValueType, GGUFWriter

    from codespec.models import gguf_file, load_manifest

    default = load_manifest()
    reader = GGUFReader(gguf_file(default.target, default.install_hint))

    def field(name: str):
        item = reader.fields[name]
        if item.types[0] == GGUFValueType.ARRAY:
            if item.types[1] == GGUFValueType.STRING:
                return [bytes(item.parts[i]).decode("utf-8") for i in item.data]
            return [int(item.parts[i][0]) for i in item.data]
        value = item.parts[item.data[0]]
        return bytes(value).decode("utf-8") if item.types[0] == GGUFValueType.STRING else value[0]

    tokens = field("tokenizer.ggml.tokens")
    vocab, heads, kv_heads, ff = len(tokens), 4, 2, 2 * hidden
    writer = GGUFWriter(str(path), "qwen2", split_max_tensors=split_max_tensors)
    if name is not None:
        writer.add_name(name)
    writer.add_context_length(4096)
    writer.add_embedding_length(hidden)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(ff)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_freq_base(1_000_000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_tokenizer_model(field("tokenizer.ggml.model"))
    writer.add_tokenizer_pre(field("tokenizer.ggml.pre"))
    writer.add_token_list(tokens)
    writer.add_token_types(field("tokenizer.ggml.token_type"))
    writer.add_token_merges(field("tokenizer.ggml.merges"))
    writer.add_eos_token_id(int(field("tokenizer.ggml.eos_token_id")))
    writer.add_bos_token_id(int(field("tokenizer.ggml.bos_token_id")))
    writer.add_pad_token_id(int(field("tokenizer.ggml.padding_token_id")))
    writer.add_add_bos_token(False)
    rng = np.random.default_rng(seed)

    def weights(*shape: int, scale: float = 0.2) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    def matrix(*shape: int, kind=None):
        """A weight matrix, as 4-bit blocks when ``quantized`` (``kind``: another block type)."""
        data = weights(*shape)
        if not quantized:
            return data
        from gguf import GGMLQuantizationType, quants

        kind = kind or GGMLQuantizationType.Q4_0
        return quants.quantize(data, kind), kind

    kv_dim = hidden // heads * kv_heads

    def add_matrix(name: str, *shape: int) -> None:
        made = matrix(*shape)
        if isinstance(made, tuple):
            writer.add_tensor(name, made[0], raw_dtype=made[1])
        else:
            writer.add_tensor(name, made)

    embedding = weights(vocab, hidden, scale=1.0).astype(np.float16)
    output = weights(vocab, hidden, scale=0.5)
    output[151643:] = 0.0
    if live_tokens is not None:
        live = np.zeros(vocab, dtype=bool)
        live[live_tokens.start : live_tokens.stop] = True
        output[~live] = 0.0
    writer.add_tensor("token_embd.weight", embedding)
    writer.add_tensor("output_norm.weight", np.ones(hidden, np.float32))
    if quantized:
        from gguf import GGMLQuantizationType, quants

        q8 = GGMLQuantizationType.Q8_0
        writer.add_tensor("output.weight", quants.quantize(output, q8), raw_dtype=q8)
    else:
        writer.add_tensor("output.weight", output.astype(np.float16))
    for i in range(layers):
        block = f"blk.{i}"
        writer.add_tensor(f"{block}.attn_norm.weight", np.ones(hidden, np.float32))
        add_matrix(f"{block}.attn_q.weight", hidden, hidden)
        writer.add_tensor(f"{block}.attn_q.bias", weights(hidden))
        add_matrix(f"{block}.attn_k.weight", kv_dim, hidden)
        writer.add_tensor(f"{block}.attn_k.bias", weights(kv_dim))
        add_matrix(f"{block}.attn_v.weight", kv_dim, hidden)
        writer.add_tensor(f"{block}.attn_v.bias", weights(kv_dim))
        add_matrix(f"{block}.attn_output.weight", hidden, hidden)
        writer.add_tensor(f"{block}.ffn_norm.weight", np.ones(hidden, np.float32))
        add_matrix(f"{block}.ffn_gate.weight", ff, hidden)
        add_matrix(f"{block}.ffn_up.weight", ff, hidden)
        add_matrix(f"{block}.ffn_down.weight", hidden, ff)
    parts = writer.format_shard_names(path)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return parts[0]


def lay_out_stores(home: Path, model: Path) -> dict[str, Path]:
    """``model`` placed as each store keeps its files; {store: where the file is}."""
    data = model.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    ollama = home / ".ollama" / "models"
    blob = ollama / "blobs" / f"sha256-{digest}"
    blob.parent.mkdir(parents=True)
    blob.write_bytes(data)
    manifest = ollama / "manifests" / "registry.ollama.ai" / "library" / "qwen2.5-coder" / "tiny"
    manifest.parent.mkdir(parents=True)
    layers = [
        {"mediaType": "application/vnd.ollama.image.license", "digest": "sha256:" + "0" * 64},
        {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}"},
    ]
    manifest.write_text(json.dumps({"schemaVersion": 2, "layers": layers}))
    lmstudio = home / ".lmstudio" / "models" / "Qwen" / "tiny-GGUF" / "tiny-q8_0.gguf"
    lmstudio.parent.mkdir(parents=True)
    lmstudio.write_bytes(data)
    repo = home / ".cache" / "huggingface" / "hub" / "models--Qwen--tiny-GGUF"
    (repo / "blobs").mkdir(parents=True)
    (repo / "blobs" / digest).write_bytes(data)
    snapshot = repo / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    (snapshot / "tiny.gguf").symlink_to(Path("../../blobs") / digest)  # as the hub writes it
    llamacpp = home / ".cache" / "llama.cpp" / "Qwen_tiny-GGUF_tiny.gguf"
    llamacpp.parent.mkdir(parents=True)
    llamacpp.write_bytes(data)
    return {
        "ollama": blob,
        "lmstudio": lmstudio,
        "hf": repo / "blobs" / digest,
        "llamacpp": llamacpp,
    }


def environment_in(home: Path) -> dict[str, str]:
    """This process's environment with ``home`` as the user's home and no store named by a
    variable (the prepared embedded models stay where they are, not re-joined)."""
    from codespec.models.sources import cache_root

    cache = os.environ.get("CODESPEC_CACHE_DIR") or str(cache_root())
    env = {**os.environ, "HOME": str(home), "CODESPEC_CACHE_DIR": cache}
    for name in ("OLLAMA_MODELS", "LLAMA_CACHE", "HF_HOME", "HF_HUB_CACHE"):
        env.pop(name, None)
    return env


# The file of the outside review's next-edit case (issue 65): renaming ``width`` in ``area()``
# once drew an edit that broke it (``test_nextedit_guard.py``, ``test_real_model.py``).
SHAPES = """def area(width, height):
    return width * height


def perimeter(width, height):
    return 2 * (width + height)


def describe(width, height):
    a = area(width, height)
    p = perimeter(width, height)
    return f"{width}x{height}: area {a}, perimeter {p}"
"""
