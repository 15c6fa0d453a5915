"""The torch target backend: a causal LM with its KV cache and the token ids that cache holds.

This is the only place that touches the Hugging Face cache layout. The decode loop sees the
operations of the target-backend seam (``backend.py``):

* ``prefill(ids)``: make the cache hold ``ids``, reusing the longest common prefix with what is
  already cached (crop, then extend) and return the logits after the last id;
* ``forward(tokens, mask, positions)``: append tokens (a chain, or a token tree with a tree
  attention mask) and return the logits at each of them;
* ``keep(n, extra)``: keep the first ``n`` cached positions plus the chosen ``extra`` ones
  (the accepted path of a token tree), dropping the rest; ``crop(n)``, ``reset()``;
* ``look_ahead(prompts, known)``: compute, in one tree pass, the rows of several prompts a
  request may come with next (``ahead.py``).

Passes of the architectures ``decoder.py`` knows (Qwen2, Llama) go through its lean forward,
bit-identical to the model's own and cheaper per pass; others through the model's forward.

A pass given a ``StopSignal`` (``stop.py``) asks it before each decoder layer; once it says
stop, the layers that had run already hold the new positions, so they are cut back, the cache
is as before the pass, and ``Cancelled`` is raised. Warm-ups use it: a long prefill chunk for a
place nobody asked about yet gives way to a real request within one layer.

It holds several caches, one per place (``slots.py``); appending writes into growing buffers
(``buffers.py``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray

from ..engine import prefill
from ..engine.ahead import TreeLookAhead
from ..engine.backend import NO_ROW_LIMIT
from ..engine.slots import PARKED_BUDGET_BYTES, Slot, SlotPool
from ..engine.stop import Cancelled, StopSignal
from ..engine.tree import Logits
from . import decoder
from .attention import CHAIN, use_rowwise_attention
from .attention import NAME as ATTENTION_NAME
from .buffers import cache_bytes, fork, growing


class CachedModel:
    """One resident model and its reusable KV cache (batch size 1)."""

    max_pass_rows = NO_ROW_LIMIT  # row-wise attention keeps any width exact

    def __init__(
        self,
        model: Any,  # a transformers causal LM (its config and parts are reached by name)
        prefill_chunk: int = 256,
        slots: int = 4,
        parked_budget_bytes: int = PARKED_BUDGET_BYTES,
    ) -> None:
        from transformers import DynamicCache

        self.model = model
        self.device = next(model.parameters()).device
        self.prefill_chunk = prefill_chunk
        self._new_cache: Callable[[], Any] = lambda: growing(DynamicCache(config=model.config))
        self.cache: Any = self._new_cache()  # a transformers Cache of ``GrowingLayer``s
        self.ids: list[int] = []  # the tokens whose keys/values are in the cache, in order
        self.pool = SlotPool(cache_bytes, slots, parked_budget_bytes)  # the other places
        self.forward_calls = 0
        self.decoder_layers = _decoder_layers(model)  # where a stopped pass can stop
        self.lean_decoder = decoder.supports(model)  # see _lean
        self.ahead = TreeLookAhead(self)  # prompts computed ahead (``ahead.py``)

    @property
    def vocab_size(self) -> int:
        return self.model.config.vocab_size

    def use_width_independent_rows(self) -> None:
        """Row-wise attention from now on: a position's logits do not depend on the width of
        the pass that computes it (``attention.py``)."""
        use_rowwise_attention(self.model)

    @property
    def threads(self) -> int:
        return torch.get_num_threads()

    def use_threads(self, n: int) -> None:
        """Run the next passes on ``n`` threads (torch's are per process: the draft's too)."""
        if torch.get_num_threads() != n:
            torch.set_num_threads(n)

    # -- cache edits (each ends a standing look-ahead first) ---------------------------------

    def _layers(self) -> list:
        return [layer for layer in self.cache.layers if getattr(layer, "keys", None) is not None]

    def crop(self, n: int) -> None:
        """Keep the first ``n`` cached positions."""
        self.ahead.end()
        if n >= len(self.ids):
            return
        self._cut(n)
        self.ids = self.ids[:n]

    def keep(self, n: int, extra: list[int]) -> None:
        """Keep positions ``[0, n)`` plus the positions in ``extra`` (all ``>= n``, ascending)."""
        self.ahead.end()
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
        self.ahead.standing = None
        self.cache = self._new_cache()
        self.ids = []
        self.pool.clear()

    # -- places (``prefill.Places``) ---------------------------------------------------------

    def current_slot(self) -> Slot:
        return Slot(self.ids, self.cache)

    def switch_to(self, slot: Slot) -> None:
        self.ids, self.cache = slot.ids, slot.cache

    def continue_on(self, shared: int) -> None:
        """On a copy of the shared part: the parked cache is the same object, left as it is."""
        self.cache = fork(self.cache, shared) if shared else self._new_cache()
        self.ids = self.ids[:shared]

    # -- passes ------------------------------------------------------------------------------

    @torch.inference_mode()
    def forward(
        self,
        tokens: list[int],
        tree_mask: NDArray[np.bool_] | None = None,
        depths: list[int] | None = None,
        all_logits: bool = True,
        stop: StopSignal | None = None,
    ) -> Logits:
        """Append ``tokens`` and return float32 logits, (len(tokens), V) or (1, V), as a
        host array (the loop's maths is numpy's: ``engine/tree.py``).

        ``tree_mask`` (q, q) says which of the new tokens each new token may attend to (a token
        tree); ``depths`` gives each token's distance from the cached end (its position offset).
        Without them the tokens form a plain causal chain. ``stop`` is asked before each decoder
        layer (as for a decoding pass: see ``stop.py``); once it says stop the pass leaves the
        cache as it was and raises ``Cancelled``.
        """
        self.ahead.end()
        past = len(self.ids)
        mask = positions = None
        if tree_mask is not None:
            assert depths is not None
            # (q, past + q): every new token sees the whole cache and its own ancestors.
            mask = torch.ones(len(tokens), past + len(tokens), dtype=torch.bool)
            mask[:, past:] = torch.from_numpy(np.asarray(tree_mask, dtype=np.bool_))
            positions = [past + d for d in depths]
        return self.run_pass(tokens, mask, positions, all_logits, stop)

    @torch.inference_mode()
    def run_pass(
        self,
        tokens: list[int],
        mask: torch.Tensor | NDArray[np.bool_] | None,  # (q, past + q) bool: what each new
        # token sees; None: causal
        positions: list[int] | None,  # each new token's position; None: after the cache
        all_logits: bool,
        stop: StopSignal | None,
        prefill_rows: int | None = None,  # a prefill chunk's rows (``StopSignal.stops_pass``)
    ) -> Logits:
        """One model pass appending ``tokens`` to the cache (see ``forward``)."""
        past = len(self.ids)
        q = len(tokens)
        input_ids = torch.tensor([tokens], device=self.device)
        attention_mask = position_ids = None
        if mask is not None:
            attention_mask = torch.as_tensor(mask).to(self.device)[None, None]
        if positions is not None:
            position_ids = torch.tensor([positions], device=self.device)
        check = _layer_check(stop, prefill_rows)
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
                    before_layer=check,
                )
            else:
                logits = self._model_forward(
                    input_ids, attention_mask, position_ids, all_logits, check
                )
        except Cancelled:  # the layers that ran hold the new positions, the others never got them
            self._cut(past)
            raise
        self.ids.extend(tokens)
        self.forward_calls += 1
        return logits[0].float().cpu().numpy()  # (waits for a GPU's pass to end)

    def _lean(self) -> bool:
        """Whether passes go through ``decoder.forward`` (the model's own forward otherwise):
        for the architectures it knows, once row-wise attention is on (it calls that)."""
        return self.lean_decoder and self.model.config._attn_implementation == ATTENTION_NAME

    def _model_forward(self, input_ids, mask, positions, all_logits, check) -> torch.Tensor:
        """A pass through the Hugging Face model's own forward."""
        # tells row-wise attention what the mask is, so that no layer inspects it
        kwargs: dict = {CHAIN: mask is None}
        if mask is not None:
            kwargs["attention_mask"], kwargs["position_ids"] = mask, positions
        with _checked_between_layers(self.decoder_layers, check):
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
        stop: StopSignal | None = None,
        chunk: int | None = None,
    ) -> tuple[Logits, int, int]:
        """Make the cache hold ``ids``; return (logits after the last id, reused, computed).

        The longest common prefix with the cached ids is kept; at least the last id is always
        recomputed, because its logits are what the caller needs. Long tails go in chunks;
        ``stop`` is asked between chunks (what was computed stays cached for next time) and
        between the layers of a chunk (that chunk is then dropped), as ``stop.py`` says.
        """
        logits, reuse = prefill.start(self, ids)
        if logits is not None:  # computed ahead
            return logits, len(ids), 0
        for begin, end in prefill.chunks(reuse, len(ids), chunk or self.prefill_chunk, stop):
            rows = ids[begin:end]
            logits = self.run_pass(rows, None, None, False, stop, prefill_rows=len(rows))
        assert logits is not None  # (at least the last id is computed)
        return logits[-1], reuse, len(ids) - reuse


def _layer_check(stop: StopSignal | None, prefill_rows: int | None) -> Callable[[], None] | None:
    """What runs before each decoder layer: raise ``Cancelled`` once ``stop`` says so."""
    if stop is None:
        return None

    def check() -> None:
        if stop.stops_pass(prefill_rows):
            raise Cancelled()

    return check


def _decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's stack of decoder layers (the ``ModuleList`` of ``num_hidden_layers``)."""
    count = getattr(getattr(model, "config", None), "num_hidden_layers", None)
    for module in model.modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) == count:
            return list(module)
    return []


@contextlib.contextmanager
def _checked_between_layers(
    layers: list[torch.nn.Module], check: Callable[[], None] | None
) -> Iterator[None]:
    """While inside: run ``check`` before each of ``layers`` (it raises to stop the pass)."""
    if check is None:
        yield
        return

    def ask(module: torch.nn.Module, args: tuple) -> None:
        check()

    handles = [layer.register_forward_pre_hook(ask) for layer in layers]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
