"""Binary-tree aggregation of a stream of clipped sums (the noise of DP-FTRL).

Leaf t is the clipped sum of cohort t. The noisy prefix sum after t leaves is the true
prefix sum plus the noise of the dyadic tree nodes that cover [1, t]; every node's noise
is drawn once (deterministically from the seed and the node's position), so one leaf
touches at most floor(log2 T) + 1 nodes, which is what the tree-aggregation accountant
assumes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from benchmark.privacy.errors import PrivacyError


def covering_nodes(t: int) -> list[tuple[int, int]]:
    """Dyadic nodes (level, index) whose intervals partition leaves [0, t)."""
    nodes, start = [], 0
    for level in reversed(range(t.bit_length())):
        if t >> level & 1:
            nodes.append((level, start >> level))
            start += 1 << level
    return nodes


@dataclass
class TreeAggregator:
    dim: int
    clip_norm: float
    noise_multiplier: float
    cohorts: list[list[int]]
    seed: list[int]
    step: int = 0
    prefix: np.ndarray = field(default=None)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.prefix is None:
            self.prefix = np.zeros(self.dim)

    def next_cohort(self) -> list[int]:
        if self.step >= len(self.cohorts):
            raise PrivacyError(
                f"the tree has {len(self.cohorts)} leaves and all are used; open a new tree "
                "(restart) so no client contributes twice to one tree"
            )
        return self.cohorts[self.step]

    def _node_noise(self, level: int, index: int) -> np.ndarray:
        rng = np.random.default_rng([*self.seed, level, index])
        return rng.normal(0.0, self.noise_multiplier * self.clip_norm, size=self.dim)

    def add_leaf(self, leaf: np.ndarray) -> np.ndarray:
        self.prefix = self.prefix + leaf
        self.step += 1
        noise = sum((self._node_noise(*n) for n in covering_nodes(self.step)), np.zeros(self.dim))
        return self.prefix + noise

    def state_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> TreeAggregator:
        return cls(**state)
