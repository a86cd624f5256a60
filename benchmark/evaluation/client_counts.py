"""Per-client hits of one metric on one held-out part: what a record keeps so that the
published score can be recomputed and resampled over the clients that were scored
(the paired bootstrap of :mod:`benchmark.evaluation.stats`).

A score is a micro-average, hits / tokens summed over the part's clients. For next-token
accuracy a token is a predicted token and a hit a correct top-1 guess; for a mean of
verdicts in {0, ½, 1} (the preference track's win rate and reward accuracy) each scored
tuple counts 2 tokens and 2 × its verdict as hits, so a tie is one hit of two, and a tuple
a seed did not score counts 0 of 0.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class ClientCounts:
    """Hits and tokens per client of one part, clients in sorted id order: enough to
    recompute the part's score (sum of hits / sum of tokens) and to resample it over
    clients. Published with a hash of the id list, never the ids: two rows are paired only
    when they scored the same clients. ``key`` names the metric's score (``top1``,
    ``win_rate``): the published hits are ``<key>_hits``.

    What it adds to a record: per held-out client, how much of them was scored (a function
    of their texts alone) and the release's hits on them. The held-out clients are outside
    the DP guarantee in every metric (scored without noise), and these counts give
    per-client detail on them. That is harmless for the built-in sources, which are public
    corpora; a split whose held-out texts are secret should not publish them."""

    clients: tuple[str, ...]
    hits: tuple[int, ...]
    tokens: tuple[int, ...]
    key: str = "top1"

    def clients_sha256(self) -> str:
        return hashlib.sha256("\n".join(self.clients).encode()).hexdigest()

    def to_json(self) -> dict[str, Any]:
        return {
            "clients_sha256": self.clients_sha256(),
            f"{self.key}_hits": list(self.hits),
            "tokens": list(self.tokens),
        }


def summed_per_client(
    hits: Sequence[float], tokens: Sequence[float], client_ids: Sequence[str], key: str = "top1"
) -> ClientCounts:
    """Per-item ``hits`` and ``tokens`` summed per client (``client_ids`` aligned with them)."""
    clients = sorted(set(client_ids))
    index = {c: i for i, c in enumerate(clients)}
    owner = np.array([index[c] for c in client_ids], dtype=np.int64)
    summed_hits = np.bincount(owner, hits, len(clients)) if len(owner) else np.zeros(0)
    summed_tokens = np.bincount(owner, tokens, len(clients)) if len(owner) else np.zeros(0)
    return ClientCounts(
        tuple(clients),
        tuple(int(round(h)) for h in summed_hits),
        tuple(int(round(t)) for t in summed_tokens),
        key,
    )


def verdict_counts(
    part_ids: Sequence[str], scored_ids: Sequence[str], verdicts: Sequence[float], key: str
) -> ClientCounts:
    """Verdicts in {0, ½, 1} on ``scored_ids`` (a subset of the part's clients
    ``part_ids``) as counts over every client of the part: 2 tokens and 2 × verdict hits per
    scored item, 0 of 0 for a client not scored, so the counts of two seeds that scored
    different subsets are still over one client list."""
    doubled = 2 * np.asarray(verdicts, dtype=np.float64)
    if np.any((doubled != np.round(doubled)) | (doubled < 0) | (doubled > 2)):
        raise ValueError("verdicts must be 0, 0.5 or 1")
    unscored = sorted(set(part_ids) - set(scored_ids))
    return summed_per_client(
        [*doubled, *np.zeros(len(unscored))],
        [*np.full(len(doubled), 2.0), *np.zeros(len(unscored))],
        [*scored_ids, *unscored],
        key,
    )
