"""Which keystrokes to compute ahead, and the prompts a request would build after them.

Typing a character of the ghost text costs nothing (the rest of it stays shown). Typing any
other character needs a target pass over the prompt's new last token(s) before the first
token of the new completion exists: on a CPU, the better part of a keystroke's wait. The
likeliest such characters are the first characters of the tokens the model itself ranks high at
the cursor, so while the user reads the ghost text, the daemon computes those prompts' rows as
token trees (``engine.Engine.look_ahead``); a request that comes with one of them starts from
its logits. How often the typed character is among the few likeliest is measured by
``benchmarks/next_keys.py`` (``docs/benchmarks.md``, "Measurements behind the code").
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .engine.tree import Logits
from .engine.verify import logits_to_probs
from .prompt import Anchor, extend_anchor

# how many of the model's likeliest tokens are read for their first characters
TOP_TOKENS = 64


def likely_next_chars(
    tokenizer: Any, logits: Logits, count: int, skip: str = "", top: int = TOP_TOKENS
) -> list[str]:
    """Up to ``count`` characters, likeliest first, that the next token begins with (the
    probability of the ``top`` likeliest tokens summed by first character). ``skip``: a
    character not to list (the ghost text's first, which typing through answers already);
    newlines are never listed (they end an anchored prompt), nor special tokens' text."""
    if count <= 0:
        return []
    probs = logits_to_probs(logits, 1.0)
    k = min(top, probs.shape[-1])
    ids = np.argpartition(probs, -k)[-k:]
    ids = ids[np.argsort(probs[ids])[::-1]]  # the ``top`` likeliest, likeliest first
    values = probs[ids]
    special = set(getattr(tokenizer, "all_special_ids", ()))
    base = getattr(tokenizer, "vocab_size", None)
    mass: dict[str, float] = {}
    for p, token in zip(values.tolist(), ids.tolist(), strict=True):
        if token in special or (base is not None and token >= base):
            continue  # end of text, FIM markers and other added tokens
        text = tokenizer.decode([token])
        char = text[:1]
        if not char or char in "\r\n\ufffd" or char == skip:
            continue
        mass[char] = mass.get(char, 0.0) + p
    return sorted(mass, key=mass.__getitem__, reverse=True)[:count]


def next_key_prompts(
    tokenizer: Any, anchor: Anchor, prefix: str, suffix: str, chars: list[str]
) -> list[list[int]]:
    """The prompts requests would build (``prompt.extend_anchor``) at the cursor between
    ``prefix`` and ``suffix`` after typing each of ``chars`` there."""
    prompts = []
    for char in chars:
        ids = extend_anchor(tokenizer, anchor, prefix + char, suffix)
        if ids is not None:
            prompts.append(ids)
    return prompts
