"""Seeded torch randomness that leaves the caller's global RNG state untouched."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Run the block with torch's RNGs seeded to ``seed``, then restore the previous state."""
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield
