"""A causal LM with its KV cache and the token ids that cache holds.

This is the only place that touches the Hugging Face cache layout. Everything else sees three
operations:

* ``prefill(ids)``: make the cache hold ``ids``, reusing the longest common prefix with what is
  already cached (crop, then extend) and return the logits after the last id;
* ``forward(tokens, mask, positions)``: append tokens (a chain, or a token tree with a tree
  attention mask) and return the logits at each of them;
* ``keep(n, extra)``: keep the first ``n`` cached positions plus the chosen ``extra`` ones
  (the accepted path of a token tree), dropping the rest;
* ``look_ahead(prompts, known)``: compute, in one tree pass, the rows of several prompts a
  request may come with next (the current one typed a character further, or that and the
  token the target chooses next); a ``prefill`` of one of them then returns its logits
  without a pass (see ``LookAhead``).

Passes of the architectures ``decoder.py`` knows (Qwen2, Llama) go through its lean forward,
bit-identical to the model's own and cheaper per pass; others through the model's forward.

A pass given an ``interrupt`` check stops between two decoder layers once it returns true
(``Cancelled``); the layers that had run already hold the new positions, so they are cut back
and the cache is as before the pass. Warm-ups use it: a long prefill chunk for a place nobody
asked about yet gives way to a real request within one layer.

It holds several caches (*slots*): one per place recently completed or warmed. A prompt that
shares only part of what the current cache holds (a jump to another place, another document)
leaves that cache whole, parked, and continues on a copy of the shared part; a later prompt
picks whichever slot shares the longest prefix with it, so returning to a place costs nothing.
Parked slots are kept within a byte budget (least recently used go first): a float32 cache of
a 2,000-token prompt is ~115 MB for the 1.5B model, and four of them would take the resident
pair past 2.5 GB.

Appending does not copy the cache: each layer keeps its keys and values in a buffer with spare
room (``GrowingLayer``) and writes the new positions into it (``torch.cat`` of the whole cache
on every pass cost ~12% of a decode pass on a CPU). A buffer is written by one cache only: a
forked cache copies the part it shares.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from transformers.cache_utils import DynamicLayer

from . import decoder
from .attention import CHAIN
from .attention import NAME as ATTENTION_NAME
from .tree import Candidate, TokenTree

# A prompt that leaves at most this many cached tokens unshared stays in the current slot (a
# keystroke drops the previous completion's tokens, no more); a larger difference is another
# place, and the current slot is parked.
PARK_MIN_TOKENS = 96
# What all parked slots together may hold (the current one is never dropped).
PARKED_BUDGET_BYTES = 192 << 20
# A prefill chunk of at most this many tokens stops between layers when cancelled (``prefill``).
REDO_ROWS = 4


class Cancelled(Exception):
    """Raised between model passes when the request was cancelled."""


@dataclass
class LookAhead:
    """Prompts computed ahead, in one tree pass, past the ``root`` cached positions they share.

    While it stands the cache holds ``root`` positions of a plain sequence and then the tree's
    nodes, which are no sequence: ``CachedModel.settle`` turns it back into one before any
    other use (the branch a prompt takes, or the longest one it can use).
    """

    root: int
    tree: TokenTree  # the ids past ``root``; node i is cached at position ``root + i``
    logits: dict[tuple[int, ...], torch.Tensor]  # a prompt's ids past ``root`` -> its logits


def common_prefix_len(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two id lists."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class CachedModel:
    """One resident model and its reusable KV cache (batch size 1)."""

    def __init__(
        self,
        model: torch.nn.Module,
        prefill_chunk: int = 256,
        slots: int = 4,
        parked_budget_bytes: int = PARKED_BUDGET_BYTES,
    ) -> None:
        from transformers import DynamicCache

        self.model = model
        self.device = next(model.parameters()).device
        self.prefill_chunk = prefill_chunk
        self._new_cache = lambda: _growing(DynamicCache(config=model.config))
        self.cache = self._new_cache()
        self.ids: list[int] = []  # the tokens whose keys/values are in the cache, in order
        self.slots = slots
        self.parked: list[tuple[list[int], object]] = []  # other slots, most recent first
        self.parked_budget_bytes = parked_budget_bytes
        self.forward_calls = 0
        self.decoder_layers = _decoder_layers(model)  # where an interrupted pass can stop
        self.lean_decoder = decoder.supports(model)  # see _lean
        self.ahead: LookAhead | None = None  # prompts computed ahead (``look_ahead``)

    # -- cache surgery ----------------------------------------------------------------------

    def _layers(self) -> list:
        return [layer for layer in self.cache.layers if getattr(layer, "keys", None) is not None]

    def crop(self, n: int) -> None:
        """Keep the first ``n`` cached positions."""
        self.settle()
        if n >= len(self.ids):
            return
        self._cut(n)
        self.ids = self.ids[:n]

    def keep(self, n: int, extra: list[int]) -> None:
        """Keep positions ``[0, n)`` plus the positions in ``extra`` (all ``>= n``, ascending)."""
        self.settle()
        if extra == list(range(n, n + len(extra))):  # a prefix of what is cached: no copy
            self.crop(n + len(extra))
            return
        index = torch.tensor(list(range(n)) + extra, device=self.device)
        for layer in self._layers():
            layer.keys = layer.keys.index_select(-2, index)  # (1, heads, kept, head_dim)
            layer.values = layer.values.index_select(-2, index)
        self.ids = self.ids[:n] + [self.ids[i] for i in extra]

    def _cut(self, n: int) -> None:
        """Cut every layer of the current slot to its first ``n`` positions (the parked slots
        stay as they are)."""
        if n == 0:
            self.cache = self._new_cache()
            return
        for layer in self._layers():
            layer.keys = layer.keys[..., :n, :]
            layer.values = layer.values[..., :n, :]

    def reset(self) -> None:
        """Forget everything cached, in every slot."""
        self.ahead = None
        self.cache = self._new_cache()
        self.ids = []
        self.parked = []

    def _select_slot(self, ids: list[int]) -> None:
        """Make current the slot sharing the longest prefix with ``ids``; park it instead and
        continue on a copy of the shared part when ``ids`` leaves much of it unshared."""
        shared, best = common_prefix_len(self.ids, ids), None
        for i, (parked_ids, _) in enumerate(self.parked):
            n = common_prefix_len(parked_ids, ids)
            if n > shared:
                best, shared = i, n
        if best is not None:
            parked_ids, parked_cache = self.parked.pop(best)
            self._park()
            self.ids, self.cache = parked_ids, parked_cache
        if len(self.ids) - shared > PARK_MIN_TOKENS and self.slots > 1:
            self._park()
            self.cache = _fork(self.cache, shared) if shared else self._new_cache()
            self.ids = self.ids[:shared]

    def _park(self) -> None:
        if self.ids:
            self.parked.insert(0, (self.ids, self.cache))
            del self.parked[self.slots - 1 :]  # the least recently used slot goes
            while self.parked and sum(cache_bytes(c) for _, c in self.parked) > (
                self.parked_budget_bytes
            ):
                self.parked.pop()

    # -- passes ------------------------------------------------------------------------------

    @torch.inference_mode()
    def forward(
        self,
        tokens: list[int],
        tree_mask: torch.Tensor | None = None,
        depths: list[int] | None = None,
        all_logits: bool = True,
        interrupt: Callable[[], bool] | None = None,
    ) -> torch.Tensor:
        """Append ``tokens`` and return float32 logits, (len(tokens), V) or (1, V).

        ``tree_mask`` (q, q) says which of the new tokens each new token may attend to (a token
        tree); ``depths`` gives each token's distance from the cached end (its position offset).
        Without them the tokens form a plain causal chain. ``interrupt`` is asked before each
        decoder layer: once it returns true the pass stops, leaves the cache as it was, and
        raises ``Cancelled``.
        """
        self.settle()
        past = len(self.ids)
        mask = positions = None
        if tree_mask is not None:
            assert depths is not None
            # (q, past + q): every new token sees the whole cache and its own ancestors.
            mask = torch.ones(len(tokens), past + len(tokens), dtype=torch.bool)
            mask[:, past:] = tree_mask
            positions = [past + d for d in depths]
        return self._pass(tokens, mask, positions, all_logits, interrupt)

    @torch.inference_mode()
    def _pass(
        self,
        tokens: list[int],
        mask: torch.Tensor | None,  # (q, past + q) bool: what each new token sees; None: causal
        positions: list[int] | None,  # each new token's position; None: after the cache
        all_logits: bool,
        interrupt: Callable[[], bool] | None,
    ) -> torch.Tensor:
        """One model pass appending ``tokens`` to the cache (see ``forward``)."""
        past = len(self.ids)
        q = len(tokens)
        input_ids = torch.tensor([tokens], device=self.device)
        attention_mask = position_ids = None
        if mask is not None:
            attention_mask = mask.to(self.device)[None, None]
        if positions is not None:
            position_ids = torch.tensor([positions], device=self.device)
        try:
            if self._lean():
                if position_ids is None:
                    position_ids = torch.arange(past, past + q, device=self.device).unsqueeze(0)
                logits = decoder.forward(
                    self.model,
                    input_ids,
                    self.cache,
                    position_ids,
                    attention_mask,
                    last_only=not all_logits,
                    before_layer=_raiser(interrupt),
                )
            else:
                logits = self._model_forward(
                    input_ids, attention_mask, position_ids, all_logits, interrupt
                )
        except Cancelled:  # the layers that ran hold the new positions, the others never got them
            self._cut(past)
            raise
        self.ids.extend(tokens)
        self.forward_calls += 1
        return logits[0].float()

    def _lean(self) -> bool:
        """Whether passes go through ``decoder.forward`` (the model's own forward otherwise):
        for the architectures it knows, once row-wise attention is on (it calls that)."""
        return self.lean_decoder and self.model.config._attn_implementation == ATTENTION_NAME

    def _model_forward(self, input_ids, mask, positions, all_logits, interrupt) -> torch.Tensor:
        """A pass through the Hugging Face model's own forward."""
        # tells row-wise attention what the mask is, so that no layer inspects it
        kwargs: dict = {CHAIN: mask is None}
        if mask is not None:
            kwargs["attention_mask"], kwargs["position_ids"] = mask, positions
        with _asked_between_layers(self.decoder_layers, interrupt):
            out = self.model(
                input_ids=input_ids,
                cache=self.cache,
                use_cache=True,
                logits_to_keep=0 if all_logits else 1,
                **kwargs,
            )
        self.cache = out.cache
        return out.logits

    def prefill(
        self,
        ids: list[int],
        cancel: threading.Event | None = None,
        chunk: int | None = None,
        interrupt: Callable[[], bool] | None = None,
    ) -> tuple[torch.Tensor, int, int]:
        """Make the cache hold ``ids``; return (logits after the last id, reused, computed).

        The longest common prefix with the cached ids is kept; at least the last id is always
        recomputed, because its logits are what the caller needs. Long tails go in chunks, with
        a cancellation check between chunks (what was computed stays cached for next time) and,
        given ``interrupt``, between the layers of a chunk (that chunk is then dropped). A
        chunk of at most ``REDO_ROWS`` tokens (a keystroke's) also stops between layers on
        ``cancel``: the request that cancelled it, typed one character further, computes those
        rows in its own pass for ~15-25% of a pass a row on a CPU, less than waiting out the
        rest of this one (half a pass on average), and the last of them is often tokenized
        differently there anyway.
        """
        if not ids:
            raise ValueError("cannot prefill an empty prompt")
        ahead = self.settle(ids)
        if ahead is not None:  # computed ahead: the cache holds ``ids`` and this is its answer
            return ahead, len(ids), 0
        self._select_slot(ids)
        reuse = min(common_prefix_len(self.ids, ids), len(ids) - 1)
        self.crop(reuse)
        logits = None
        step = chunk or self.prefill_chunk
        for start in range(reuse, len(ids), step):
            if cancel is not None and cancel.is_set():
                raise Cancelled()
            rows = ids[start : start + step]
            stop = interrupt
            if cancel is not None and len(rows) <= REDO_ROWS:
                stop = functools.partial(either, cancel.is_set, interrupt)
            logits = self.forward(rows, all_logits=False, interrupt=stop)
        assert logits is not None
        return logits[-1], reuse, len(ids) - reuse

    # -- looking ahead ------------------------------------------------------------------------

    def look_ahead(
        self,
        prompts: list[list[int]],
        known: dict[tuple[int, ...], torch.Tensor] | None = None,
        interrupt: Callable[[], bool] | None = None,
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
        root (so the likeliest can be ready sooner). ``interrupt``: see ``forward``; the rows
        of the interrupted pass are dropped, those of earlier passes stay.
        """
        known = dict(known or {})
        wanted = [*prompts, *map(list, known)]
        ahead, self.ahead = self.ahead, None
        if ahead is None or any(ids[: ahead.root] != self.ids[: ahead.root] for ids in wanted):
            self.ahead = ahead
            self.settle()
            ahead = self._new_look_ahead(wanted, known)
        root, tree, before = ahead.root, ahead.tree, len(ahead.tree)
        for ids in prompts:
            if len(ids) > root:
                tree.add(Candidate(ids[root:], "ahead"), max_nodes=len(tree) + len(ids))
        try:
            if len(tree) > before:
                logits = self._pass(
                    tree.tokens[before:],
                    _tree_rows_mask(tree, root, before),
                    [root + tree.depths[i] - 1 for i in range(before, len(tree))],
                    all_logits=True,
                    interrupt=interrupt,
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
                if len(_spelled(tree, ids[root:])) == len(ids) - root:
                    ahead.logits.setdefault(tuple(ids[root:]), row)
            self.ahead = ahead if ahead.logits else None
            if self.ahead is None:
                self.crop(root)  # nothing to look ahead at: the cache stays a plain sequence
        return len(tree) - before

    def _new_look_ahead(
        self, wanted: list[list[int]], known: dict[tuple[int, ...], torch.Tensor]
    ) -> LookAhead:
        """An empty look-ahead rooted where ``wanted`` and the cache part. A ``known`` prompt
        the cache holds stays cached: its ids past the root become the tree's first nodes (at
        the positions they have), so they are neither dropped nor computed again."""
        root = min([len(self.ids)] + [common_prefix_len(self.ids, ids) for ids in wanted])
        held = [ids for ids in known if list(ids) == self.ids[: len(ids)]]
        end = max(map(len, held), default=root)
        self.crop(end)
        tree = TokenTree()
        if end > root:
            tree.add(Candidate(self.ids[root:end], "ahead"), max_nodes=end - root)
        return LookAhead(root, tree, {})

    def looked_ahead(self, ids: list[int]) -> bool:
        """Whether ``ids`` is one of the prompts computed ahead (a prefill of it is free)."""
        ahead = self.ahead
        return (
            ahead is not None
            and self.ids[: ahead.root] == ids[: ahead.root]
            and tuple(ids[ahead.root :]) in ahead.logits
        )

    def sequence(self) -> list[int]:
        """The ids cached as a plain sequence (a look-ahead's tree rows come after them)."""
        return self.ids[: self.ahead.root] if self.ahead is not None else self.ids

    def ahead_logits(self, ids: list[int]) -> torch.Tensor | None:
        """The logits after ``ids`` if it is one of the prompts computed ahead, else None."""
        if not self.looked_ahead(ids):
            return None
        assert self.ahead is not None
        return self.ahead.logits[tuple(ids[self.ahead.root :])]

    def settle(self, ids: list[int] | None = None) -> torch.Tensor | None:
        """End a look-ahead: keep the branch of ``ids`` when it is one of the prompts computed
        ahead (and return its logits), else the longest branch that begins ``ids`` (what a
        prefill of ``ids`` reuses), else just the root. The branch's own descendants computed
        ahead (its likeliest next token, say) stay, as a look-ahead rooted at ``ids``."""
        ahead, self.ahead = self.ahead, None
        if ahead is None:
            return None
        if ids is None or self.ids[: ahead.root] != ids[: ahead.root]:
            self.crop(ahead.root)
            return None
        tail = tuple(ids[ahead.root :])
        path = _spelled(ahead.tree, list(tail))
        logits = ahead.logits.get(tail)
        rest = {t[len(tail) :]: row for t, row in ahead.logits.items() if t[: len(tail)] == tail}
        rest.pop((), None)
        if logits is None or not path or not rest:
            self.keep(ahead.root, [ahead.root + i for i in path])
            return logits
        below, tree = _subtree(ahead.tree, path[-1])
        self.keep(ahead.root, [ahead.root + i for i in path + below])
        self.ahead = LookAhead(len(ids), tree, rest)
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


def _tree_rows_mask(tree: TokenTree, root: int, start: int) -> torch.Tensor:
    """What tree nodes ``start..`` see, (new, root + nodes): the root's positions, and their
    own ancestors and themselves among the nodes (cached at ``root + node``)."""
    ancestors = tree.attention()[0][1 + start :, 1:]  # (over [root token] + nodes: drop it)
    return torch.cat([torch.ones(len(ancestors), root, dtype=torch.bool), ancestors], dim=1)


def _spelled(tree: TokenTree, tokens: list[int]) -> list[int]:
    """The nodes that spell the longest beginning of ``tokens`` from the tree's root."""
    path, node = [], -1
    for token in tokens:
        node = next((c for c in tree.children(node) if tree.tokens[c] == token), None)
        if node is None:
            break
        path.append(node)
    return path


def either(first: Callable[[], bool], second: Callable[[], bool] | None) -> bool:
    """Whether ``first()`` or, given, ``second()`` is true."""
    return first() or (second is not None and second())


def _decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's stack of decoder layers (the ``ModuleList`` of ``num_hidden_layers``)."""
    count = getattr(getattr(model, "config", None), "num_hidden_layers", None)
    for module in model.modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) == count:
            return list(module)
    return []


@contextlib.contextmanager
def _asked_between_layers(
    layers: list[torch.nn.Module], interrupt: Callable[[], bool] | None
) -> Iterator[None]:
    """While inside: before each of ``layers`` runs, raise ``Cancelled`` if ``interrupt()``."""
    if interrupt is None:
        yield
        return

    def ask(module: torch.nn.Module, args: tuple) -> None:
        if interrupt():
            raise Cancelled()

    handles = [layer.register_forward_pre_hook(ask) for layer in layers]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _raiser(interrupt: Callable[[], bool] | None) -> Callable[[], None] | None:
    """``interrupt`` as a check that raises ``Cancelled`` once it returns true."""
    if interrupt is None:
        return None

    def check() -> None:
        if interrupt():
            raise Cancelled()

    return check


class GrowingLayer(DynamicLayer):
    """A ``DynamicLayer`` whose keys and values are views of the first positions of a larger
    buffer: appending writes the new positions into the spare room (and regrows, copying, when
    there is none) instead of concatenating the whole cache. Cropping slices the views as
    before; the positions past them are overwritten by the next append.

    The buffer is written only while ``keys`` is a view of its start: after ``keep`` of a tree
    branch (a gathered copy) or in a fork (see ``_fork``) the next append regrows."""

    ROOM = 128  # spare positions allocated with each regrow

    buffers: tuple[torch.Tensor, torch.Tensor] | None = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n = self.keys.shape[-2] if self.keys.dim() == 4 else 0
        end = n + key_states.shape[-2]
        if not self._can_write(end):
            self._regrow(n, end + self.ROOM, key_states)
        assert self.buffers is not None
        key_buffer, value_buffer = self.buffers
        key_buffer[..., n:end, :] = key_states
        value_buffer[..., n:end, :] = value_states
        self.keys, self.values = key_buffer[..., :end, :], value_buffer[..., :end, :]
        return self.keys, self.values

    def _can_write(self, end: int) -> bool:
        return (
            self.buffers is not None
            and self.buffers[0].shape[-2] >= end
            and self.keys.data_ptr() == self.buffers[0].data_ptr()
            and self.values.data_ptr() == self.buffers[1].data_ptr()
        )

    def _regrow(self, n: int, capacity: int, like: torch.Tensor) -> None:
        shape = (*like.shape[:-2], capacity, like.shape[-1])
        key_buffer = like.new_empty(shape)
        value_buffer = like.new_empty(shape)
        if n:
            key_buffer[..., :n, :] = self.keys
            value_buffer[..., :n, :] = self.values
        self.buffers = (key_buffer, value_buffer)

    def reset(self) -> None:
        self.buffers = None
        super().reset()


def _growing(cache):
    """``cache`` with its plain full-attention layers replaced by ``GrowingLayer``s."""
    cache.layers = [
        GrowingLayer() if type(layer) is DynamicLayer else layer for layer in cache.layers
    ]
    return cache


def cache_bytes(cache) -> int:
    """Memory a cache holds: its layers' buffers (spare room included) or tensors."""
    total = 0
    for layer in cache.layers:
        tensors = getattr(layer, "buffers", None) or (
            getattr(layer, "keys", None),
            getattr(layer, "values", None),
        )
        total += sum(t.numel() * t.element_size() for t in tensors if t is not None)
    return total


def _fork(cache, n: int):
    """A cache holding a copy of the first ``n`` positions of ``cache``: each then appends to
    buffers of its own, so the two never change each other."""
    forked = copy.copy(cache)
    forked.layers = [copy.copy(layer) for layer in cache.layers]
    for layer in forked.layers:
        if getattr(layer, "keys", None) is not None:
            layer.keys = layer.keys[..., :n, :].clone()
            layer.values = layer.values[..., :n, :].clone()
            layer.buffers = None
    return forked


def timed(fn, *args, **kwargs):
    """Run ``fn`` and return (result, elapsed seconds)."""
    t0 = time.perf_counter()
    result = fn(*args, **kwargs)
    if torch.cuda.is_available():
        torch.cuda.synchronize()  # GPU work is asynchronous: wait before reading the clock
    return result, time.perf_counter() - t0
