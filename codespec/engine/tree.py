"""Token trees: several candidate continuations merged into one tree, verified in one pass.

The root is the *pending* token: the last token chosen by the target, not yet in its cache.
Every candidate is a path below the root; candidates sharing a prefix share nodes. The target
reads ``[root] + nodes`` in one forward pass with a tree attention mask (each node sees the
cache, the root and its own ancestors) and position ids ``cached + depth``, so each node's
logits are exactly what a plain left-to-right pass over its path would give.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

# Logits (or a distribution) over the vocabulary: (V,) for a position, (n, V) for n of them.
# Every backend hands the loop float32 numpy arrays: the loop needs no torch (a CPU daemon on
# llama.cpp's kernels never imports it).
Logits = NDArray[np.float32]


@dataclass
class Candidate:
    """A proposed continuation of the current context.

    ``q`` holds the proposer's probability for each token, (len(tokens), V), when the tokens
    were *sampled* from it (the draft at temperature > 0). ``None`` means the tokens are a
    deterministic function of the context (n-gram lookup, greedy draft): for the acceptance
    rule they count as one-hot proposals.
    """

    tokens: list[int]
    source: str  # "ngram" | "draft"
    q: Logits | None = None
    evidence: int = 0  # how strongly the context backs it (n-gram: the match length)
    support: str = ""  # n-gram: whether the other matches agree on its first token (ngram.py)


@dataclass
class TokenTree:
    """Nodes in insertion order; a parent always comes before its children."""

    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)  # -1: child of the root
    depths: list[int] = field(default_factory=list)  # root = 0
    sources: list[set[str]] = field(default_factory=list)
    q: list[Logits | None] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.tokens)

    def children(self, node: int) -> list[int]:
        """Children of ``node`` (-1 for the root), in insertion order (best candidate first)."""
        return [i for i, p in enumerate(self.parents) if p == node]

    def add(self, candidate: Candidate, max_nodes: int, under: int = -1) -> int:
        """Insert a candidate below node ``under``; return the deepest node it reaches."""
        node = under
        for k, token in enumerate(candidate.tokens):
            match = next((c for c in self.children(node) if self.tokens[c] == token), None)
            if match is not None:
                self.sources[match].add(candidate.source)
                node = match
                continue
            if len(self.tokens) >= max_nodes:
                break
            self.tokens.append(token)
            self.parents.append(node)
            self.depths.append(1 if node < 0 else self.depths[node] + 1)
            self.sources.append({candidate.source})
            self.q.append(None if candidate.q is None else candidate.q[k])
            node = len(self.tokens) - 1
        return node

    def main_chain(self) -> list[int]:
        """Nodes along the first child of each node from the root: the best candidate, and the
        draft's continuation of it."""
        chain, kids = [], self.children(-1)
        while kids:
            chain.append(kids[0])
            kids = self.children(kids[0])
        return chain

    def subset(self, keep: list[int]) -> tuple[TokenTree, dict[int, int]]:
        """The tree of the nodes in ``keep`` (each one's parent kept too), and old -> new index."""
        kept = sorted(keep)
        index = {old: new for new, old in enumerate(kept)}
        index[-1] = -1
        sub = TokenTree()
        for old in kept:
            assert self.parents[old] in index, "a kept node needs its parent"
            sub.tokens.append(self.tokens[old])
            sub.parents.append(index[self.parents[old]])
            sub.depths.append(self.depths[old])
            sub.sources.append(set(self.sources[old]))
            sub.q.append(self.q[old])
        return sub, index

    def path_to(self, node: int) -> list[int]:
        """Node indices from the root's child down to ``node``."""
        path = []
        while node >= 0:
            path.append(node)
            node = self.parents[node]
        return path[::-1]

    def attention(self) -> tuple[NDArray[np.bool_], list[int]]:
        """The (1+n, 1+n) ancestor mask over [root] + nodes, and each one's depth."""
        n = len(self.tokens)
        mask = np.zeros((n + 1, n + 1), dtype=np.bool_)
        mask[:, 0] = True  # everyone sees the root
        for i in range(n):
            row = i + 1
            mask[row, row] = True
            parent = self.parents[i]
            if parent >= 0:
                mask[row] |= mask[parent + 1]
        return mask, [0] + self.depths

    def is_chain(self) -> bool:
        """True when every node is the only child of its parent."""
        return all(p == i - 1 for i, p in enumerate(self.parents))
