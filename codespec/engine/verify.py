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

import torch

from .tree import TokenTree


def logits_to_probs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Softmax at a temperature, in float32. (V,) or (n, V)."""
    return torch.softmax(logits.float() / max(temperature, 1e-5), dim=-1)


def sample(probs: torch.Tensor, generator: torch.Generator | None) -> int:
    """Draw one token id from a (V,) distribution."""
    return int(torch.multinomial(probs, 1, generator=generator).item())


def greedy_choice(logits: torch.Tensor, children: list[int]) -> tuple[int | None, int]:
    """(index into ``children`` of the accepted child or None, the target's token)."""
    token = int(torch.argmax(logits).item())
    for i, child_token in enumerate(children):
        if child_token == token:
            return i, token
    return None, token


def speculative_choice(
    p: torch.Tensor,
    children: list[int],
    child_q: list[torch.Tensor | None],
    generator: torch.Generator | None,
) -> tuple[int | None, int]:
    """Rejection sampling at one node; returns (accepted child index or None, token)."""
    p = p.clone()
    for i, (x, q) in enumerate(zip(children, child_q, strict=True)):
        if q is None:  # deterministic proposal: q is one-hot at x
            q = torch.zeros_like(p)
            q[x] = 1.0
        ratio = (p[x] / q[x].clamp_min(1e-20)).clamp(max=1.0)
        u = torch.rand((), generator=generator, device=p.device)
        if u < ratio:
            return i, x
        residual = (p - q).clamp_min(0.0)
        total = residual.sum()
        if total <= 0:  # p == q exactly: nothing left to reject into; p is still correct
            continue
        p = residual / total
    return None, sample(p, generator)


def walk_tree(
    tree: TokenTree,
    logits: torch.Tensor,
    temperature: float,
    generator: torch.Generator | None = None,
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
            choice, token = speculative_choice(p, kid_tokens, [tree.q[k] for k in kids], generator)
        if choice is None:
            return accepted, token
        node = kids[choice]
        accepted.append(node)
