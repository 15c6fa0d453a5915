"""Look-ahead trees: the prompts of the next keystrokes computed ahead in one tree pass.

While nobody waits, the engine computes the rows of several prompts a request may come with next
(the current one typed a character further, or that and the token the target chooses next) as
one token tree over the prompt they share. A prefill of one of them then returns its logits
without a pass. Each branch's rows see the root and their own ancestors at their own positions,
so a row's numbers are those a prefill of that prompt computes (where one-row passes are exact,
which ``calibration.py`` checks).

While a look-ahead stands, the cache holds ``root`` positions of a plain sequence and then the
tree's nodes, which are no sequence: ``end`` turns it back into one (the branch a prompt takes,
or the longest one it can use). The cached model's other operations (``crop``, ``keep``,
``forward``) end a standing look-ahead first.

A backend's look-ahead is one object on the backend seam, ``target.ahead`` (a ``LookAhead``): what
every backend answers alike (is a prompt computed ahead, and its logits) is written once here; how
rows are computed and kept is each backend's. ``TreeLookAhead`` is the torch backend's
(``torch_backend.kvcache.CachedModel`` holds one; it sees the model only through ``RowCache``);
``ggml/ahead.py`` is the ggml backend's.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

import numpy as np
from numpy.typing import NDArray

from .slots import common_prefix_len
from .stop import Cancelled, StopSignal
from .tree import Candidate, Logits, TokenTree


@dataclass
class AheadTree:
    """Prompts computed ahead, in one tree pass, past the ``root`` cached positions they share."""

    root: int
    tree: TokenTree  # the ids past ``root``; node i is cached at position ``root + i``
    logits: dict[tuple[int, ...], Logits]  # a prompt's ids past ``root`` -> its logits


class Standing(Protocol):
    """A standing look-ahead, as every backend keeps one: the cached positions its prompts
    share, and each prompt's logits by its ids past them."""

    root: int
    logits: dict[tuple[int, ...], Logits]


S = TypeVar("S", bound=Standing)


class LookAhead(ABC, Generic[S]):
    """A backend's prompts computed ahead (``target.ahead``); ``standing`` is the current
    look-ahead, if any. The questions are answered here, the same for every backend; the
    subclass computes, ends and spells."""

    standing: S | None = None

    @abstractmethod
    def cached_ids(self) -> list[int]:
        """The ids the cache holds as text (a look-ahead's rows are past ``root`` of them)."""

    @abstractmethod
    def look_ahead(
        self,
        prompts: list[list[int]],
        known: dict[tuple[int, ...], Logits] | None = None,
        stop: StopSignal | None = None,
    ) -> int:
        """Compute the rows of ``prompts`` ahead and keep them with their last logits, for a
        prefill of one of them; return the rows computed. ``known``: prompts the cache holds
        whose logits the caller has. ``stop`` drops the pass it stops (earlier passes stay)."""

    @abstractmethod
    def end(self, ids: list[int] | None = None) -> Logits | None:
        """End a standing look-ahead (none: nothing to do): when ``ids`` is one of its prompts,
        the cache holds it after and its logits are returned; else None."""

    @abstractmethod
    def sequence(self) -> list[int]:
        """The ids cached as a plain sequence (a look-ahead's rows come after them)."""

    @property
    def looking_ahead(self) -> bool:
        """Whether a look-ahead stands (the cache is more than a plain sequence)."""
        return self.standing is not None

    def looked_ahead(self, ids: list[int]) -> bool:
        """Whether ``ids`` is one of the prompts computed ahead (a prefill of it is free)."""
        return self.ahead_logits(ids) is not None

    def ahead_logits(self, ids: list[int]) -> Logits | None:
        """The logits after ``ids`` if it is one of the prompts computed ahead, else None."""
        ahead = self.standing
        if ahead is None:
            return None
        root = ahead.root
        if self.cached_ids()[:root] != ids[:root]:
            return None
        return ahead.logits.get(tuple(ids[root:]))


class RowCache(Protocol):
    """What the tree look-ahead needs of the torch backend: the cached ids, cutting them back,
    keeping a path, and one pass of rows at given positions under a given mask."""

    ids: list[int]

    def crop(self, n: int) -> None: ...

    def keep(self, n: int, extra: list[int]) -> None: ...

    def run_pass(
        self,
        tokens: list[int],
        mask: NDArray[np.bool_] | None,
        positions: list[int] | None,
        all_logits: bool,
        stop: StopSignal | None,
    ) -> Logits: ...


class TreeLookAhead(LookAhead[AheadTree]):
    """Prompts computed ahead as token trees over a ``RowCache``."""

    def __init__(self, cache: RowCache) -> None:
        self.cache = cache
        self.standing = None

    def cached_ids(self) -> list[int]:
        return self.cache.ids

    def look_ahead(
        self,
        prompts: list[list[int]],
        known: dict[tuple[int, ...], Logits] | None = None,
        stop: StopSignal | None = None,
    ) -> int:
        """Compute the rows of ``prompts`` in one tree pass and keep them, with their last
        logits, for a ``prefill`` of one of them; return the rows computed.

        The tree's root is the longest prefix that every prompt and the cached ids share; past
        it the cache keeps only a ``known`` prompt it holds (whose logits the caller has: its
        rows become the tree's first nodes), and the prompts' remaining ids become the tree's
        other branches (a prompt ending at the root is kept only when ``known`` holds its
        logits). Each branch's rows see the root and their own ancestors, at their own
        positions, so a row's logits are those a prefill of that prompt computes (row-wise
        attention; kernels that compute each row alone: the caller checks that one-row passes
        are exact). Called again while a look-ahead stands,
        it adds the new prompts to that tree in a pass of their own, as long as they share its
        root (so the likeliest can be ready sooner). ``stop``: see ``forward``; the rows of
        a pass it stops are dropped, those of earlier passes stay.
        """
        cache = self.cache
        known = dict(known or {})
        wanted = [*prompts, *map(list, known)]
        ahead, self.standing = self.standing, None
        if ahead is None or any(ids[: ahead.root] != cache.ids[: ahead.root] for ids in wanted):
            self.standing = ahead
            self.end()
            ahead = self._new_look_ahead(wanted, known)
        root, tree, before = ahead.root, ahead.tree, len(ahead.tree)
        for ids in prompts:
            if len(ids) > root:
                tree.add(Candidate(ids[root:], "ahead"), max_nodes=len(tree) + len(ids))
        try:
            if len(tree) > before:
                logits = cache.run_pass(
                    tree.tokens[before:],
                    _tree_rows_mask(tree, root, before),
                    [root + tree.depths[i] - 1 for i in range(before, len(tree))],
                    all_logits=True,
                    stop=stop,
                )
                for ids in prompts:
                    node = _spelled(tree, ids[root:])
                    if len(ids) > root and node[-1] >= before:
                        ahead.logits[tuple(ids[root:])] = logits[node[-1] - before]
        except Cancelled:
            ahead.tree = tree = tree.subset(list(range(before)))[0]
            raise
        finally:
            for ids, row in known.items():  # those the tree spells, or that end at the root
                if len(_spelled(tree, list(ids[root:]))) == len(ids) - root:
                    ahead.logits.setdefault(tuple(ids[root:]), row)
            self.standing = ahead if ahead.logits else None
            if self.standing is None:
                cache.crop(root)  # nothing to look ahead at: the cache stays a plain sequence
        return len(tree) - before

    def _new_look_ahead(
        self, wanted: list[list[int]], known: dict[tuple[int, ...], Logits]
    ) -> AheadTree:
        """An empty look-ahead rooted where ``wanted`` and the cache part. A ``known`` prompt
        the cache holds stays cached: its ids past the root become the tree's first nodes (at
        the positions they have), so they are neither dropped nor computed again."""
        cached = self.cache.ids
        root = min([len(cached)] + [common_prefix_len(cached, ids) for ids in wanted])
        held = [ids for ids in known if list(ids) == cached[: len(ids)]]
        end = max(map(len, held), default=root)
        self.cache.crop(end)
        tree = TokenTree()
        if end > root:
            tree.add(Candidate(self.cache.ids[root:end], "ahead"), max_nodes=end - root)
        return AheadTree(root, tree, {})

    def sequence(self) -> list[int]:
        """The ids cached as a plain sequence (a look-ahead's tree rows come after them)."""
        ids = self.cache.ids
        return ids[: self.standing.root] if self.standing is not None else ids

    def end(self, ids: list[int] | None = None) -> Logits | None:
        """End a look-ahead: keep the branch of ``ids`` when it is one of the prompts computed
        ahead (and return its logits), else the longest branch that begins ``ids`` (what a
        prefill of ``ids`` reuses), else just the root. The branch's own descendants computed
        ahead (its likeliest next token, say) stay, as a look-ahead rooted at ``ids``."""
        ahead, self.standing = self.standing, None
        if ahead is None:
            return None
        cache = self.cache
        if ids is None or cache.ids[: ahead.root] != ids[: ahead.root]:
            cache.crop(ahead.root)
            return None
        tail = tuple(ids[ahead.root :])
        path = _spelled(ahead.tree, list(tail))
        logits = ahead.logits.get(tail)
        rest = {t[len(tail) :]: row for t, row in ahead.logits.items() if t[: len(tail)] == tail}
        rest.pop((), None)
        if logits is None or not path or not rest:
            cache.keep(ahead.root, [ahead.root + i for i in path])
            return logits
        below, tree = _subtree(ahead.tree, path[-1])
        cache.keep(ahead.root, [ahead.root + i for i in path + below])
        self.standing = AheadTree(len(ids), tree, rest)
        return logits


def _subtree(tree: TokenTree, node: int) -> tuple[list[int], TokenTree]:
    """The descendants of ``node`` (ascending) and the tree they form below it."""
    below: list[int] = []
    sub = TokenTree()
    index = {node: -1}
    for i in range(node + 1, len(tree)):
        if tree.parents[i] in index:
            index[i] = len(below)
            below.append(i)
            sub.tokens.append(tree.tokens[i])
            sub.parents.append(index[tree.parents[i]])
            sub.depths.append(tree.depths[i] - tree.depths[node])
            sub.sources.append(set(tree.sources[i]))
            sub.q.append(None)
    return below, sub


def _tree_rows_mask(tree: TokenTree, root: int, start: int) -> NDArray[np.bool_]:
    """What tree nodes ``start..`` see, (new, root + nodes): the root's positions, and their
    own ancestors and themselves among the nodes (cached at ``root + node``)."""
    ancestors = tree.attention()[0][1 + start :, 1:]  # (over [root token] + nodes: drop it)
    return np.concatenate([np.ones((len(ancestors), root), dtype=np.bool_), ancestors], axis=1)


def _spelled(tree: TokenTree, tokens: list[int]) -> list[int]:
    """The nodes that spell the longest beginning of ``tokens`` from the tree's root."""
    path, node = [], -1
    for token in tokens:
        node = next((c for c in tree.children(node) if tree.tokens[c] == token), None)
        if node is None:
            break
        path.append(node)
    return path
