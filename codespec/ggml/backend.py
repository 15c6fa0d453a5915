"""The ggml target backend: the seam of ``engine/backend.py`` over llama.cpp's CPU kernels.

Speed or exactness. llama.cpp picks kernels by the width of a pass: with its repacked 4-bit
weights a lone row goes through a GEMV kernel and groups of four rows through a GEMM kernel,
whose sums round differently; the tiled path joins at eight rows, and flash attention takes a
split-K/V path for a lone row over a long cache. By default (``padded=False``) every pass takes
the fastest kernel for its width: a lone token costs what it costs llama.cpp itself, and a row
of a wider verification pass may round a near-tie the other way from one-row decoding (the
bench counts such holes and shows each divergence's margin: ``docs/benchmarks.md``).

Where exact rows are asked for (``padded=True``, ``--exact``), every pass is padded to a whole
number of four-row groups (rows no one reads, under a sequence of their own, freed after the
pass): every row of every decode pass, plain or speculative, is then a GEMM row, and a row's
numbers do not depend on the others in its pass, so speculative output is bit for bit plain
greedy decoding's. Where llama.cpp's tiled path is on (its default), such passes stay at four
rows; with ``GGML_CPU_TILED_MM=0`` they may be wider. ``benchmarks/ggml_invariance.py``
measures which settings are exact and what they cost (``docs/benchmarks.md``, "ggml as a
verifier"); ``rows_are_exact`` checks it at load.

Prefill chunks are not padded: their rows may round differently from a decode pass's, but
plain and speculative decoding of a request start from the same prefilled cache, so they still
agree token for token. With exact rows a prompt's last ids (up to a group) are a padded pass,
so its logits do not depend on how the rest was chunked.

Trees. One sequence per leaf, each node in the sequences of every leaf below it, the cached
text shared with them (llama.cpp's mask shows a cell to a row when the cell carries the row's
first sequence at a lower or equal position). After the walk the accepted path joins sequence
0 and the rejected nodes are *parked*: kept under a sequence nobody reads, because freeing them
would leave holes that later tokens fill out of position order, and flash attention sums cells
in index order. Parked cells are given back when the cache is compacted (the text saved and
restored, contiguous) or the place is parked.

Places. The other places' caches are parked as bytes (``llama_state_seq_get_data``) within the
slot pool's budget (``engine/slots.py``); going back restores them.

Look-ahead. The prompts of the next keystrokes are computed ahead in passes of their own
(padded with exact rows), each under a leaf sequence (``ahead.py``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ..engine import prefill
from ..engine.slots import PARKED_BUDGET_BYTES, Slot, SlotPool
from ..engine.stop import Cancelled, StopSignal
from ..engine.tree import Logits
from .ahead import GgmlLookAhead
from .cells import CellCount
from .layout import COMPACT_AT, GROUP, LEAVES, PADDING, PARKED, SEQUENCES, TEXT
from .llama import Aborted, CacheFull, LlamaContext, Node, Settings


def pass_rows_limit() -> int:
    """Rows a decode pass may have and stay exact: a group, unless the tiled path is off."""
    return 16 if os.environ.get("GGML_CPU_TILED_MM") == "0" else GROUP


@dataclass
class TreePass:
    """The last pass, when it was a token tree: what ``keep`` needs to settle its cells."""

    start: int  # position (and index in ``ids``) of its first row
    sequences: list[tuple[int, ...]]  # each row's sequences, the first decides what it sees
    leaves: list[int]  # the leaf sequences it used


class GgmlModel:
    """A GGUF model on llama.cpp's CPU kernels with codespec's cache rules (one per model)."""

    def __init__(
        self,
        path: str,
        padded: bool = True,
        settings: Settings | None = None,
        slots: int = 4,
        parked_budget_bytes: int = PARKED_BUDGET_BYTES,
        library: str = "llama.cpp",
    ) -> None:
        self.llama = LlamaContext(path, settings or Settings(n_seq_max=SEQUENCES, library=library))
        self.padded = padded  # exact rows (``--exact``); a draft always runs lone rows
        self.max_pass_rows = pass_rows_limit() if padded else self.llama.settings.n_batch
        self.ids: list[int] = []
        self.prefill_chunk = self.llama.settings.n_batch
        self.forward_calls = 0
        self.pool = SlotPool(len, slots, parked_budget_bytes)
        self.cells = CellCount()  # cells parked under PARKED (``cells.py``)
        self.tree: TreePass | None = None
        self.ahead = GgmlLookAhead(self)  # prompts computed ahead (``ahead.py``)

    @property
    def vocab_size(self) -> int:
        return self.llama.n_vocab

    @property
    def text_cells(self) -> int:
        """The cells kept for text (the rest are for parked tree nodes)."""
        return int(self.llama.n_ctx * COMPACT_AT)

    @property
    def text_tokens(self) -> int:
        """The most tokens a prompt and its completion may hold: the cells kept for text,
        less a decoding pass's rows."""
        return self.text_cells - GROUP

    def use_width_independent_rows(self) -> None:
        """Nothing to switch: padding to whole groups is what makes rows width-independent."""

    @property
    def threads(self) -> int:
        return self.llama.threads

    def use_threads(self, n: int) -> None:
        self.llama.use_threads(n)

    def close(self) -> None:
        self.llama.close()

    # -- passes ------------------------------------------------------------------------------

    def prefill(
        self, ids: list[int], stop: StopSignal | None = None, chunk: int | None = None
    ) -> tuple[Logits, int, int]:
        """Make the cache hold ``ids`` (reusing the longest cached prefix, in any slot); return
        (logits after the last id, reused, computed). ``stop`` is asked between chunks (what
        was computed stays) and inside a chunk (that chunk is dropped)."""
        ahead, reuse = prefill.start(self, ids)
        if ahead is not None:  # computed ahead: the text holds ``ids`` and this is its answer
            return ahead, len(ids), 0
        self._make_room(len(ids) - reuse)
        step = max(1, min(chunk or self.prefill_chunk, self.llama.settings.n_batch))
        # The target computes the prompt's last few ids (up to a group) in a padded pass, as
        # decoding steps are: their logits and K/V are then the same whether the rest was
        # prefilled just now, earlier or in other chunks (a chunk's rows round by its width),
        # and a keystroke's few new ids cost one pass.
        tail = min(GROUP, len(ids) - reuse) if self.padded else 0
        body = len(ids) - tail
        logits = None
        for begin, end in prefill.chunks(reuse, body, step, stop):
            rows = ids[begin:end]
            last = end == len(ids)
            nodes = [
                (t, begin + i, (TEXT,), last and i == len(rows) - 1) for i, t in enumerate(rows)
            ]
            logits = self.decode(nodes, stop, prefill_rows=len(rows))
            self.ids.extend(rows)
            self.forward_calls += 1
        if tail:
            if stop is not None and stop.at_chunk_end():
                raise Cancelled()
            nodes = [(t, body + i, (TEXT,), i == tail - 1) for i, t in enumerate(ids[body:])]
            logits = self.decode(nodes, stop, prefill_rows=tail, pad=True)
            self.ids.extend(ids[body:])
            self.forward_calls += 1
        assert logits is not None
        return logits[-1], reuse, len(ids) - reuse

    def forward(
        self,
        tokens: list[int],
        tree_mask: NDArray[np.bool_] | None = None,
        depths: list[int] | None = None,
        all_logits: bool = True,
        stop: StopSignal | None = None,
    ) -> Logits:
        """Append a chain, or a token tree (``tree_mask``: which new token sees which;
        ``depths``: each one's position past the cache), and return float32 logits at each
        token, (len(tokens), V), or (1, V) for the last one."""
        self._end_tree()
        past = len(self.ids)
        if tree_mask is None:
            sequences = [(TEXT,)] * len(tokens)
            positions = [past + i for i in range(len(tokens))]
        else:
            assert depths is not None
            sequences = tree_sequences(tree_mask)
            positions = [past + d for d in depths]
        want = [all_logits or i == len(tokens) - 1 for i in range(len(tokens))]
        nodes = list(zip(tokens, positions, sequences, want, strict=True))
        leaves = sorted({s for seqs in sequences for s in seqs if s != TEXT})
        self._make_room(len(nodes) + GROUP)
        for leaf in leaves:  # the text is every leaf's too (metadata only)
            self.llama.share(TEXT, leaf)
        try:
            logits = self.decode(nodes, stop)
        except Cancelled:
            for leaf in leaves:  # llama.cpp dropped the pass's cells, not the sharing
                self.llama.remove(leaf)
            raise
        self.ids.extend(tokens)
        self.forward_calls += 1
        if leaves:
            self.tree = TreePass(past, sequences, leaves)
        assert logits is not None  # (the last row always asks)
        return logits

    def decode(
        self,
        nodes: list[Node],
        stop: StopSignal | None,
        prefill_rows: int | None = None,
        pad: bool | None = None,
    ) -> np.ndarray | None:
        """One llama.cpp pass: the logits of the rows that ask (None: no row asks). A decode
        pass of the target is padded to whole groups, and all its rows ask for logits:
        llama.cpp runs the last layer and the output matrix on the rows that ask only, so
        asking for fewer would change those kernels' width."""
        padding: list[Node] = []
        wanted = [want for *_, want in nodes]
        pad = self.padded and prefill_rows is None if pad is None else pad
        if pad:
            nodes = [(token, pos, seqs, True) for token, pos, seqs, _ in nodes]
            padding = [(nodes[-1][0], k, (PADDING,), True) for k in range(-len(nodes) % GROUP)]
        abort = (lambda: stop.stops_pass(prefill_rows)) if stop is not None else None
        try:
            logits = self.llama.decode(nodes + padding, abort)
            if pad and logits is not None:
                logits = logits[: len(wanted)][np.array(wanted)]
            return logits
        except Aborted:
            raise Cancelled() from None
        finally:
            if padding:  # the newest cells: freeing them leaves no hole below the text
                self.llama.remove(PADDING)

    # -- cache edits -------------------------------------------------------------------------

    def keep(self, n: int, extra: list[int]) -> None:
        """Keep positions ``[0, n)`` plus the positions in ``extra`` (all ``>= n``, ascending:
        an accepted path of the last pass)."""
        tree, self.tree = self.tree, None
        if tree is None:  # a chain: what is kept is a prefix of it
            assert extra == list(range(n, n + len(extra))), "a chain keeps a prefix"
            self.crop(n + len(extra))
            return
        if extra:  # the leaf below the path's last node spells the whole path
            leaf = tree.sequences[extra[-1] - tree.start][0]
            if leaf != TEXT:
                self.llama.share(leaf, TEXT, n, n + len(extra))
        self._park_leaves(tree, n)
        self.cells.join(len(extra))  # (the path's cells are the text's now)
        self.ids = self.ids[:n] + [self.ids[i] for i in extra]
        self.llama.remove(TEXT, len(self.ids))  # (a trunk past the path: the newest cells)

    def _park_leaves(self, tree: TreePass, n: int) -> None:
        """Move the tree's nodes past position ``n`` out of its leaf sequences into PARKED."""
        for leaf in tree.leaves:
            self.llama.share(leaf, PARKED, n)
            self.llama.remove(leaf)
        self.cells.park(sum(1 for seqs in tree.sequences if TEXT not in seqs))

    def _end_tree(self) -> None:
        """Settle a tree pass nobody called ``keep`` for (a cancelled request): keep its trunk;
        end a standing look-ahead (the text stays as it is)."""
        self.ahead.end()
        if self.tree is not None:
            tree, self.tree = self.tree, None
            trunk = sum(1 for seqs in tree.sequences if TEXT in seqs)
            self._park_leaves(tree, tree.start + trunk)
            self.ids = self.ids[: tree.start + trunk]

    def crop(self, n: int) -> None:
        """Keep the first ``n`` cached positions (the rest are the newest cells of the text:
        freeing them leaves no hole below it)."""
        self._end_tree()
        if n < len(self.ids):
            self.llama.remove(TEXT, n)
            self.ids = self.ids[:n]

    def reset(self) -> None:
        """Forget everything cached, in every slot."""
        self.tree = self.ahead.standing = None
        self.llama.clear()
        self.ids = []
        self.cells.reset()
        self.pool.clear()

    def _make_room(self, rows: int) -> None:
        """Give parked cells back when the cache could run out of cells in position order."""
        limit = self.text_cells
        if len(self.ids) + rows > limit:
            raise ValueError(
                f"{len(self.ids) + rows} tokens do not fit the context ({limit} of "
                f"{self.llama.n_ctx} cells are for text)"
            )
        if self.cells.crowded(len(self.ids), rows, limit):
            self.compact()

    def compact(self) -> None:
        """Rewrite the text's cells contiguously from cell 0 (parked cells are dropped)."""
        self._end_tree()
        saved = self.llama.save(TEXT) if self.ids else b""
        self.llama.clear()
        self.cells.reset()
        if saved:
            self._restore(saved)

    def _restore(self, saved: bytes) -> None:
        try:
            self.llama.restore(saved, TEXT)
        except CacheFull:  # cannot happen in a cleared cache of the same size; be safe
            self.llama.clear()
            self.ids = []

    # -- places (slots) ----------------------------------------------------------------------

    def current_slot(self) -> Slot:
        """The text's cells, saved as bytes (a tree pass or look-ahead settled first)."""
        self._end_tree()
        return Slot(list(self.ids), self.llama.save(TEXT) if self.ids else b"")

    def switch_to(self, slot: Slot) -> None:
        """Empty the cache and restore a parked slot's cells into it."""
        self._end_tree()
        self.llama.clear()
        self.ids = slot.ids
        self.cells.reset()
        self._restore(slot.cache)

    def continue_on(self, shared: int) -> None:
        """The parked slot is bytes: the text's own cells are cut back in place."""
        self.crop(shared)


def tree_sequences(tree_mask: NDArray[np.bool_]) -> list[tuple[int, ...]]:
    """Each node's sequences for a tree pass: the leaf sequences of every leaf below it, first
    the leaf it sees through; nodes every leaf sees (the trunk) are in the text's sequence
    first. ``tree_mask[i, j]``: node i sees node j (its ancestors and itself)."""
    mask = np.asarray(tree_mask, dtype=np.bool_)
    q = len(mask)
    leaves = [i for i in range(q) if not any(mask[j, i] for j in range(q) if j != i)]
    if len(leaves) > len(LEAVES):
        raise ValueError(f"a tree of {len(leaves)} leaves (at most {len(LEAVES)} here)")
    seq_of = {leaf: LEAVES[k] for k, leaf in enumerate(leaves)}
    out = []
    for i in range(q):
        below = [seq_of[leaf] for leaf in leaves if mask[leaf, i]]
        out.append(((TEXT,) if len(below) == len(leaves) else ()) + tuple(below))
    return out


def rows_are_exact(model: GgmlModel, context: int = 40) -> bool:
    """Whether a row is the same bits alone and inside the widest pass this backend runs,
    and the token after them too (checked at load: kernels differ by CPU)."""
    vocab = model.vocab_size
    ids = [(7 * i + 100) % vocab for i in range(context + model.max_pass_rows + 1)]
    head, rest = ids[:context], ids[context:]
    model.prefill(head)
    alone = [model.forward([token])[0] for token in rest]
    model.crop(context)
    wide = model.forward(rest[:-1])
    after = model.forward(rest[-1:])[0]
    model.reset()
    rows = [*wide, after]
    return all(np.array_equal(a, b) for a, b in zip(alone, rows, strict=True))
