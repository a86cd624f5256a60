"""Seeded subsampling of text sets shared by the distribution metrics."""

from __future__ import annotations

from typing import TypeVar

import numpy as np

T = TypeVar("T")


def shuffled_subset(texts: list[T], max_samples: int | None, seed: int) -> list[T]:
    """A seeded shuffle of ``texts`` truncated to ``max_samples``.

    Shuffling first matters: split parts are stored client by client (and often in date or
    book order), so a plain prefix would compare one topic against another (MAUVE is very
    sensitive to this; see offline-feasibility.md section 2(d)).
    """
    order = np.random.default_rng(seed).permutation(len(texts))
    if max_samples is not None:
        order = order[:max_samples]
    return [texts[i] for i in order]
