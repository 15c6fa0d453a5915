"""The growing KV buffer: appending a pass's positions without copying the whole cache.

Each full-attention layer keeps its keys and values in a buffer with spare room and writes the
new positions into it; ``torch.cat`` of the whole cache on every pass would cost a noticeable
share of a CPU decode pass. A buffer is written by one cache only: a forked cache (a slot that
continues from part of another, see ``slots.py``) copies the part it shares.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from transformers.cache_utils import DynamicLayer


class GrowingLayer(DynamicLayer):
    """A ``DynamicLayer`` whose keys and values are views of the first positions of a larger
    buffer: appending writes the new positions into the spare room (and regrows, copying, when
    there is none) instead of concatenating the whole cache. Cropping slices the views as
    before; the positions past them are overwritten by the next append.

    The buffer is written only while ``keys`` is a view of its start: after ``keep`` of a tree
    branch (a gathered copy) or in a fork (see ``fork``) the next append regrows."""

    ROOM = 128  # spare positions allocated with each regrow

    buffers: tuple[torch.Tensor, torch.Tensor] | None = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        assert self.keys is not None and self.values is not None  # (initialized above)
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
            and self.keys is not None
            and self.values is not None
            and self.buffers[0].shape[-2] >= end
            and self.keys.data_ptr() == self.buffers[0].data_ptr()
            and self.values.data_ptr() == self.buffers[1].data_ptr()
        )

    def _regrow(self, n: int, capacity: int, like: torch.Tensor) -> None:
        shape = (*like.shape[:-2], capacity, like.shape[-1])
        key_buffer = like.new_empty(shape)
        value_buffer = like.new_empty(shape)
        if n and self.keys is not None and self.values is not None:
            key_buffer[..., :n, :] = self.keys
            value_buffer[..., :n, :] = self.values
        self.buffers = (key_buffer, value_buffer)

    def reset(self) -> None:
        self.buffers = None
        super().reset()


def growing(cache: Any) -> Any:
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


def fork(cache: Any, n: int) -> Any:
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
