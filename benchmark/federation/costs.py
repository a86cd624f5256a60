"""Communication and compute counters kept by the client pool (paper 000 Table 2, 004 Table 6).

They are published in result records, so they are computed from public quantities only:
participations are the *expected* count q·N of each release (the Poisson-sampled count is
private), and the floats/texts moved follow from it, the declared vector size and the
payload the method made (counted on the method's side, never by the client worker, which
runs client code and could count anything). ``client_seconds`` (the measured time of client
code) is kept for the trusted side only (the runner subtracts it from the method's own
time) and is not in :meth:`CostCounters.summary`: client code can choose how long it runs,
so a published client time carried what it read (issue 33).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np


def count_payload(payload: Any) -> tuple[int, int]:
    """(floats, texts) a client downloads for ``payload``: array elements and strings."""
    if payload is None:
        return 0, 0
    if isinstance(payload, str):
        return 0, 1
    if isinstance(payload, bool | int | float | np.number):
        return 1, 0
    if isinstance(payload, np.ndarray):
        return int(payload.size), 0
    if hasattr(payload, "numel"):  # torch.Tensor, without importing torch here
        return int(payload.numel()), 0
    if isinstance(payload, dict):
        payload = list(payload.values())
    if isinstance(payload, list | tuple):
        floats = texts = 0
        for item in payload:
            f, t = count_payload(item)
            floats, texts = floats + f, texts + t
        return floats, texts
    raise TypeError(f"cannot count the size of a {type(payload).__name__} payload")


@dataclass
class CostCounters:
    """Totals over a run; per-participation averages are derived in :meth:`summary`."""

    releases: int = 0
    participations: float = 0.0
    floats_down: float = 0.0
    texts_down: float = 0.0
    floats_up: float = 0.0
    client_seconds: float = 0.0

    def add(
        self, participants: float, floats_down: int, texts_down: int, dim: int, seconds: float
    ) -> None:
        """One release to ``participants`` clients (the expected count, never the sampled one)."""
        self.releases += 1
        self.participations += participants
        self.floats_down += participants * floats_down
        self.texts_down += participants * texts_down
        self.floats_up += participants * dim
        self.client_seconds += seconds

    def summary(self) -> dict[str, float]:
        """The published counters: public quantities only (no measured time)."""
        per = self.participations if self.participations > 0 else 1.0
        return {
            **{k: float(v) for k, v in asdict(self).items() if k not in PRIVATE_COUNTERS},
            "floats_down_per_client_round": self.floats_down / per,
            "texts_down_per_client_round": self.texts_down / per,
            "floats_up_per_client_round": self.floats_up / per,
        }


PRIVATE_COUNTERS = frozenset({"client_seconds"})  # measured from client code: never published
