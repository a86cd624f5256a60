"""The decode loop's KV cache: written in place into buffers sized for the whole generation,
in the dtype attention reads it in.

transformers' ``DynamicCache`` grows by ``torch.cat``, copying every layer's keys and values
at every step; under bf16 autocast it also keeps them in fp32, and attention casts the whole
cache to bf16 again at every step. Those two were most of a decode step (measured:
``docs/measurements/working-scale.md#generation``). Casting a key once, when it is stored,
gives attention the same bf16 values, so the samples do not change.

A sliding-window layer (15 of Gemma 3 270M's 18, window 512) whose window holds the whole
generation never lets a position go: transformers' layer then returns every position and
gives the mask a full layer's sizes, so it is preallocated too (:class:`WithinWindowLayer`;
``docs/measurements/working-scale.md``, "Gemma's sliding-window cache"). A generation longer
than the window keeps transformers' own sliding layer.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import (
    DYNAMIC_LAYER_TYPE_MAPPING,
    Cache,
    DynamicCache,
    DynamicLayer,
    get_layer_types_and_kwargs,
)


class PreallocatedLayer(DynamicLayer):
    """A full-attention layer's cache of at most ``capacity`` positions, stored in
    ``dtype`` (``None``: the keys' own dtype); ``keys`` and ``values`` are views of the
    filled part, so what reads them (sequence length, masks) sees a plain cache."""

    def __init__(self, capacity: int, dtype: torch.dtype | None) -> None:
        super().__init__()
        self.capacity, self.store_dtype, self.length = capacity, dtype, 0

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.dtype, self.device = self.store_dtype or key_states.dtype, key_states.device

        def buffer(states: torch.Tensor) -> torch.Tensor:
            batch, heads, _, dim = states.shape
            return states.new_empty((batch, heads, self.capacity, dim), dtype=self.dtype)

        self._keys, self._values = buffer(key_states), buffer(value_states)
        self.keys, self.values = self._keys[:, :, :0], self._values[:, :, :0]
        self.is_initialized = True

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        end = self.length + key_states.shape[-2]
        if end > self.capacity:
            raise ValueError(f"the KV cache holds {self.capacity} positions; {end} were asked")
        self._keys[:, :, self.length : end] = key_states
        self._values[:, :, self.length : end] = value_states
        self.length = end
        self.keys, self.values = self._keys[:, :, :end], self._values[:, :, :end]
        return self.keys, self.values


class WithinWindowLayer(PreallocatedLayer):
    """A sliding-window layer's cache for a generation of at most ``sliding_window``
    positions: until then transformers' ``DynamicSlidingWindowLayer`` drops nothing, returns
    every position and reports a full layer's mask sizes, so this is a
    :class:`PreallocatedLayer` the mask builder still sees as sliding."""

    is_sliding = True

    def __init__(self, capacity: int, dtype: torch.dtype | None, sliding_window: int) -> None:
        if capacity > sliding_window:
            raise ValueError(f"{capacity} positions do not fit a window of {sliding_window}")
        super().__init__(capacity, dtype)
        self.sliding_window = sliding_window


class PreallocatedCache(DynamicCache):
    """The cache ``DynamicCache(config=model.config)`` would build, with each full-attention
    layer a :class:`PreallocatedLayer` of ``capacity`` positions stored in ``dtype``, and
    each sliding-window layer whose window holds ``capacity`` positions a
    :class:`WithinWindowLayer`."""

    def __init__(self, model: Any, capacity: int, dtype: torch.dtype | None) -> None:
        config = model.config.get_text_config(decoder=True)
        layer_types, layer_kwargs = get_layer_types_and_kwargs(config)
        layers = [
            cache_layer(kind, kwargs, capacity, dtype)
            for kind, kwargs in zip(layer_types, layer_kwargs, strict=True)
        ]
        Cache.__init__(self, layers=layers)


def cache_layer(kind: str, kwargs: dict[str, Any], capacity: int, dtype: torch.dtype | None) -> Any:
    """A preallocated layer for a layer of ``kind`` where it gives transformers' states,
    else transformers' own (a window shorter than the generation, another kind of layer)."""
    if kind == "full_attention":
        return PreallocatedLayer(capacity, dtype)
    if kind == "sliding_attention" and capacity <= kwargs["sliding_window"]:
        return WithinWindowLayer(capacity, dtype, kwargs["sliding_window"])
    return DYNAMIC_LAYER_TYPE_MAPPING[kind](**kwargs)
