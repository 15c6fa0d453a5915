"""Test helpers: tiny random Qwen2 models built in the test (no downloads), naive decoding."""

from __future__ import annotations

import torch


def tiny_qwen2(seed: int, vocab: int = 96, hidden: int = 64, layers: int = 2):
    """A randomly initialised Qwen2-architecture causal LM, small enough for fast CPU tests."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        tie_word_embeddings=False,
        attn_implementation="sdpa",
    )
    model = Qwen2ForCausalLM(config).eval()
    with torch.no_grad():  # wider embeddings than the default init: varied, loop-prone output
        model.model.embed_tokens.weight.normal_(0.0, 1.0)
        model.lm_head.weight.mul_(2.0)
    return model


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
