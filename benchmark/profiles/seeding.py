"""Seeded torch randomness that leaves the caller's global RNG state untouched."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Run the block with torch's RNGs seeded to ``seed``, then restore the previous state.

    CUDA's state is saved and restored only where CUDA is already initialised: asking for
    its current device would initialise it, and a process that initialised CUDA can no
    longer fork a child that uses it (the independence check's recomputations are forked),
    nor, in a sandbox without the GPU, initialise it at all. Where it is not, the seed
    reaches CUDA lazily, when the block first uses it (``torch.manual_seed``)."""
    devices = [torch.cuda.current_device()] if torch.cuda.is_initialized() else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield
