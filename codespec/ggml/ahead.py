"""Look-ahead on the ggml backend: the prompts of the next keystrokes computed ahead, so that a
request typed one character further starts from their logits (``engine/ahead.py`` says what
and why; this is how on llama.cpp's cache).

While a look-ahead stands, the text's sequence holds the prompt the engine last ran (the
*known* prompt, whose logits the caller has) and each prompt computed ahead has a leaf sequence
of its own: the cells it shares with a prompt computed before it (the text's, or another
branch's), then its own new cells. Its new rows go in padded passes of at most a group of rows,
as a prefill computes a prompt's last ids (``backend.GgmlModel.prefill``); rows of such passes
do not depend on the others in the pass, so each row is the same bits the prefill of that
prompt computes, provided that prefill would compute them in one padded pass: a prompt that
differs from the text in more than a group of ids is not looked ahead. Ending a look-ahead
keeps the branch the request took (its cells join the text) and parks the others' cells, as a
tree pass's rejected nodes are.

``GgmlLookAhead`` is held by ``backend.GgmlModel`` and sees it only through ``TextCells``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from ..engine.ahead import LookAhead
from ..engine.slots import common_prefix_len
from ..engine.stop import Cancelled, StopSignal
from ..engine.tree import Logits
from .cells import CellCount
from .layout import GROUP, LEAVES, PARKED, TEXT
from .llama import LlamaContext, Node

# cells a look-ahead may use: its leaves' prompts, a pass of a group at a time
ROOM = len(LEAVES) * GROUP
# a prompt to compute ahead: its ids past the root, the sequence whose cells spell the
# beginning of them, and how many ids that is
Branch = tuple[tuple[int, ...], int, int]


@dataclass
class Branches:
    """Prompts computed ahead past the ``root`` cached positions they all share."""

    root: int
    # a prompt's ids past ``root`` -> the sequence whose cells spell them (TEXT: the text's)
    branches: dict[tuple[int, ...], int] = field(default_factory=dict)
    logits: dict[tuple[int, ...], Logits] = field(default_factory=dict)
    leaves: list[int] = field(default_factory=list)  # leaf sequences in use
    cells: int = 0  # cells computed ahead (parked when the look-ahead ends)


class TextCells(Protocol):
    """What the look-ahead needs of ``GgmlModel``: llama.cpp's context, the text's ids and
    the count of parked cells (both of which ending a look-ahead changes), the cells kept for
    text, cutting the text back, a padded pass, and compaction."""

    llama: LlamaContext
    ids: list[int]
    cells: CellCount

    @property
    def text_cells(self) -> int: ...

    def crop(self, n: int) -> None: ...

    def decode(
        self,
        nodes: list[Node],
        stop: StopSignal | None,
        prefill_rows: int | None = None,
        pad: bool | None = None,
    ) -> np.ndarray | None: ...

    def compact(self) -> None: ...


class GgmlLookAhead(LookAhead[Branches]):
    """Prompts computed ahead under leaf sequences of a ``TextCells``."""

    def __init__(self, text: TextCells) -> None:
        self.text = text
        self.standing = None

    def cached_ids(self) -> list[int]:
        return self.text.ids

    def sequence(self) -> list[int]:
        """The text's ids (its sequence stays plain while a look-ahead stands)."""
        return self.text.ids

    def look_ahead(
        self,
        prompts: list[list[int]],
        known: dict[tuple[int, ...], Logits] | None = None,
        stop: StopSignal | None = None,
    ) -> int:
        """Compute the rows of ``prompts`` ahead and keep them, with their last logits, for a
        ``prefill`` of one of them; return the rows computed. ``known``: prompts the text holds
        whose logits the caller has (their prefill is free too). Called again while a
        look-ahead stands, it adds the new prompts to it, as long as they share its root.
        ``stop`` drops the pass it stops (the passes before it stay)."""
        known = {k: v for k, v in (known or {}).items() if list(k) == self.text.ids[: len(k)]}
        wanted = [*prompts, *map(list, known)]
        ahead = self.standing
        if ahead is None or any(ids[: ahead.root] != self.text.ids[: ahead.root] for ids in wanted):
            self.end()
            ahead = self._new_look_ahead(wanted, known)
            if self.text.cells.parked and not self._room_for(ahead, ROOM):
                self.text.compact()  # (while no look-ahead stands: it keeps the text only)
        self.standing = ahead
        rows = 0
        try:
            todo = [ids for ids in prompts if self._worth_looking_ahead(ahead, ids)]
            while todo and len(ahead.leaves) < len(LEAVES) and self._room_for(ahead, GROUP):
                batch, todo = self._one_pass(ahead, todo)
                rows += self._compute(ahead, batch, stop)
        finally:
            if not ahead.logits:
                self.end()
        return rows

    def _new_look_ahead(
        self, wanted: list[list[int]], known: dict[tuple[int, ...], Logits]
    ) -> Branches:
        """An empty look-ahead rooted where ``wanted`` and the text part; the text keeps the
        longest ``known`` prompt (a completion after it is dropped)."""
        root = min([len(self.text.ids)] + [common_prefix_len(self.text.ids, ids) for ids in wanted])
        self.text.crop(max([root, *map(len, known)]))
        ahead = Branches(root)
        ahead.branches[tuple(self.text.ids[root:])] = TEXT
        for ids, logits in known.items():
            ahead.branches[tuple(ids[root:])] = TEXT
            ahead.logits[tuple(ids[root:])] = logits
        return ahead

    def _room_for(self, ahead: Branches, rows: int) -> bool:
        """Whether ``rows`` more cells (and a pass's padding) fit below the compaction mark
        (``backend.GgmlModel._make_room``), with the cells computed ahead so far."""
        used = len(self.text.ids) + self.text.cells.parked + ahead.cells
        return used + rows + GROUP <= self.text.text_cells

    def _worth_looking_ahead(self, ahead: Branches, ids: list[int]) -> bool:
        """A prompt past the root, not computed yet, whose prefill from the text would
        compute its new ids in one padded pass (so its rows here are that pass's bits)."""
        tail = tuple(ids[ahead.root :])
        if len(ids) <= ahead.root or tail in ahead.logits:
            return False
        reused = min(common_prefix_len(self.text.ids, ids), len(ids) - 1)
        return len(ids) - reused <= GROUP

    @staticmethod
    def _base(ahead: Branches, tail: tuple[int, ...]) -> tuple[int, int]:
        """(sequence, ids) of the longest beginning of ``tail`` already cached."""
        spelled = [(common_prefix_len(list(p), list(tail)), s) for p, s in ahead.branches.items()]
        shared, seq = max(spelled, key=lambda found: (found[0], found[1] == TEXT))
        return seq, min(shared, len(tail) - 1)

    def _one_pass(
        self, ahead: Branches, todo: list[list[int]]
    ) -> tuple[list[Branch], list[list[int]]]:
        """The branches of the next pass (their new rows fit a group) and the prompts left for
        later. A prompt whose new ids begin like another's in the pass waits, to be computed on
        the other's cells."""
        batch: list[Branch] = []
        later: list[list[int]] = []
        rows = 0
        starts: set[tuple[int, int, int]] = set()
        for ids in todo:
            tail = tuple(ids[ahead.root :])
            if tail in ahead.logits:
                continue  # (a prompt asked for twice)
            seq, shared = self._base(ahead, tail)
            new = len(tail) - shared
            start = (seq, shared, tail[shared])
            free = len(ahead.leaves) + len(batch) < len(LEAVES)
            if rows + new <= GROUP and start not in starts and free:
                batch.append((tail, seq, shared))
                starts.add(start)
                rows += new
            else:
                later.append(ids)
        return batch, later

    def _compute(self, ahead: Branches, batch: list[Branch], stop: StopSignal | None) -> int:
        """One padded pass with the new rows of ``batch``, each prompt under a leaf of its own
        that first shares the cells its beginning is spelled by."""
        nodes, ends, leaves = [], [], []
        for tail, seq, shared in batch:
            leaf = next(s for s in LEAVES if s not in ahead.leaves and s not in leaves)
            self.text.llama.share(seq, leaf, -1, ahead.root + shared)
            leaves.append(leaf)
            nodes += [
                (token, ahead.root + shared + i, (leaf,), True)
                for i, token in enumerate(tail[shared:])
            ]
            ends.append(len(nodes) - 1)
        try:
            logits = self.text.decode(nodes, stop)
        except Cancelled:
            for leaf in leaves:  # the pass's cells were dropped, not the sharing
                self.text.llama.remove(leaf)
            raise
        assert logits is not None  # (every row asked for its logits)
        for (tail, _, _), leaf, end in zip(batch, leaves, ends, strict=True):
            ahead.branches[tail] = leaf
            ahead.logits[tail] = logits[end]
        ahead.leaves += leaves
        ahead.cells += len(nodes)
        return len(nodes)

    def end(self, ids: list[int] | None = None) -> Logits | None:
        """End a look-ahead: when ``ids`` is one of the prompts computed ahead, its cells become
        the text and its logits are returned; else the text stays as it is. The other
        branches' cells are parked."""
        ahead, self.standing = self.standing, None
        if ahead is None:
            return None
        logits = None
        if ids is not None and ids[: ahead.root] == self.text.ids[: ahead.root]:
            logits = ahead.logits.get(tuple(ids[ahead.root :]))
        if logits is not None and ids is not None:
            seq = ahead.branches[tuple(ids[ahead.root :])]
            if seq == TEXT:
                self.text.cells.park(len(self.text.ids) - len(ids))  # (leaves may share them)
                self.text.crop(len(ids))
            else:  # the text's own cells past the root give way to the branch's
                self.text.llama.share(TEXT, PARKED, ahead.root)
                self.text.llama.remove(TEXT, ahead.root)
                self.text.cells.park(len(self.text.ids) - ahead.root)
                self.text.llama.share(seq, TEXT, ahead.root, len(ids))
                self.text.ids = list(ids)
        for leaf in ahead.leaves:
            self.text.llama.share(leaf, PARKED, ahead.root)
            self.text.llama.remove(leaf)
        self.text.cells.park(ahead.cells)  # (some may be the text's now: counting them is safe)
        return logits
