"""Acceptance maths: which proposed tokens the target keeps. Pure functions on tensors.

Notation (as in gpt-fast): ``p`` is the target's distribution at a node, ``q`` a proposer's
distribution for the token it proposed there.

Greedy (temperature 0): the target's choice is ``argmax p``. A child is accepted iff its token
equals that choice, so the output is token-identical to plain greedy decoding.

Sampling (temperature > 0), for the children x_1..x_m of a node, in order (SpecInfer's
multi-candidate rule, which is Leviathan et al.'s rule when m = 1)::

    for each child x_i with proposal distribution q_i (one-hot for deterministic proposals):
        accept x_i with probability min(1, p(x_i) / q_i(x_i))
        otherwise  p <- normalize(max(p - q_i, 0))       # the residual
    if no child was accepted: sample the next token from the final residual p

Each emitted token is then distributed exactly as the target's ``p``.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from .tree import Logits, TokenTree


def logits_to_probs(logits: Logits, temperature: float) -> Logits:
    """Softmax at a temperature, in float32. (V,) or (n, V)."""
    z = logits.astype(np.float32) / max(temperature, 1e-5)
    z = np.exp(z - z.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


def chosen_probabilities(rows: Logits, tokens: list[int]) -> list[float]:
    """The probability each row's softmax gives its token: ``rows`` (n, V), one token a row."""
    picked = rows[np.arange(len(tokens)), tokens].astype(np.float64)
    top = rows.max(axis=-1).astype(np.float64)
    totals = np.exp(rows.astype(np.float64) - top[:, None]).sum(axis=-1)
    return [float(p) for p in np.exp(picked - top) / totals]


def sample(probs: NDArray[np.floating], rng: np.random.Generator | None) -> int:
    """Draw one token id from a (V,) distribution (by its cumulative sum: a total that
    rounding left a little off 1 still draws every token in proportion)."""
    cumulative = np.cumsum(probs, dtype=np.float64)
    u = (rng or np.random.default_rng()).random() * cumulative[-1]
    return int(min(np.searchsorted(cumulative, u, side="right"), len(cumulative) - 1))


def greedy_choice(logits: Logits, children: list[int]) -> tuple[int | None, int]:
    """(index into ``children`` of the accepted child or None, the target's token)."""
    token = int(np.argmax(logits))
    for i, child_token in enumerate(children):
        if child_token == token:
            return i, token
    return None, token


def speculative_choice(
    p: Logits,
    children: list[int],
    child_q: list[Logits | None],
    rng: np.random.Generator | None,
) -> tuple[int | None, int]:
    """Rejection sampling at one node; returns (accepted child index or None, token)."""
    rng = rng or np.random.default_rng()
    dist = p.astype(np.float64)  # (residuals of residuals: float32 would lose the tail)
    for i, (x, q) in enumerate(zip(children, child_q, strict=True)):
        if q is None:  # deterministic proposal: q is one-hot at x
            q = np.zeros_like(p)
            q[x] = 1.0
        ratio = min(1.0, float(dist[x]) / max(float(q[x]), 1e-20))
        if rng.random() < ratio:
            return i, x
        residual = np.clip(dist - q, 0.0, None)
        total = residual.sum()
        if total <= 0:  # p == q exactly: nothing left to reject into; p is still correct
            continue
        dist = residual / total
    return None, sample(dist, rng)


def walk_tree(
    tree: TokenTree,
    logits: Logits,
    temperature: float,
    rng: np.random.Generator | None = None,
) -> tuple[list[int], int]:
    """Walk from the root along accepted children.

    ``logits`` is (1 + len(tree), V): row 0 for the root, row i + 1 for node i.
    Returns (accepted node indices, the bonus token chosen after the last accepted node).
    """
    accepted: list[int] = []
    node = -1
    while True:
        row = logits[node + 1]
        kids = tree.children(node)
        kid_tokens = [tree.tokens[k] for k in kids]
        if temperature <= 0:
            choice, token = greedy_choice(row, kid_tokens)
        else:
            p = logits_to_probs(row, temperature)
            choice, token = speculative_choice(p, kid_tokens, [tree.q[k] for k in kids], rng)
        if choice is None:
            return accepted, token
        node = kids[choice]
        accepted.append(node)
