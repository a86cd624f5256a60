"""How the harness trains a model that may be loaded in bf16: float32 master weights, bf16
autocast on a GPU, gradient checkpointing.

The ``paper`` profile loads its generator and preference policy in bf16 on a GPU. An update
at the papers' learning rates (5e-7 to 1e-5; Adam's first steps move a weight by about the
learning rate) against weights of ~1e-2 is far below half a bf16 step (2^-9 of the
weight), so applied to bf16 weights most of it rounds to zero and training does nothing.
Training therefore updates float32 weights, and computes the forward pass under bf16
autocast where the GPU does bf16 natively (the speed bf16 was chosen for).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

import torch


def training_autocast(model: Any) -> AbstractContextManager[Any]:
    """bf16 autocast for a forward pass of ``model`` on a GPU that computes bf16 (its
    float32 master weights are cast per operation, the gradients land in float32); nothing
    on the CPU, where the models are float32 and bf16 is slow on most processors."""
    device = next(model.parameters()).device
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return nullcontext()


@contextmanager
def float32_in_place(model: Any) -> Iterator[None]:
    """``model``'s floating parameters and buffers in float32 inside the block (master
    weights for training in place), back in their own dtypes after: what the block leaves
    in them is then rounded, so a caller that keeps a trained model keeps a float32 copy
    instead. Tied parameters stay tied (each is cast once, in place)."""
    tensors = [*model.parameters(), *model.buffers()]
    dtypes = [(t, t.dtype) for t in tensors if t.is_floating_point()]
    for tensor, _ in dtypes:
        tensor.data = tensor.data.float()
    try:
        yield
    finally:
        for tensor, dtype in dtypes:
            tensor.data = tensor.data.to(dtype)


@contextmanager
def checkpointed(model: Any, enabled: bool) -> Iterator[None]:
    """Gradient checkpointing inside the block where ``enabled`` (activations recomputed in
    the backward pass, so a paper batch fits in GPU memory), off again after: some methods
    train the profile's shared model in place."""
    if not enabled:
        yield
        return
    model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    try:
        yield
    finally:
        model.activation_checkpointing_disable()
