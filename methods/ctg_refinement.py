"""Paper 001's profile and vote functions (client side) and its post-processing (server side).

Client side, batched over one client's samples (a ``client_sample`` run makes every sample
a unit; :meth:`benchmark.federation.pool.ClientPool.local_gaussian` clips each row, adds the
client's noise and sums over clients):

- :class:`CodeCounts` — Algorithm 1 stage 2: a sample's row is the one-hot vector of its
  control code, so a client's vector is P_i = [|D_i^1|, …, |D_i^|C||]. Add/remove of one
  sample changes it by one unit vector: L2 sensitivity 1.
- :class:`KNNVotes` — Algorithm A.2: a sample votes +1 for each of the K nearest candidates
  of its own control code (L2 distance between the encoder's embeddings; the paper does not
  name the metric). Add/remove of one sample changes the vote vector by at most K ones in
  distinct places: L2 sensitivity √K. The pool clips every sample's row to √K, so a vote
  function that casts more votes per sample cannot raise its weight.

Server side (post-processing of the noisy releases, no privacy cost):

- :func:`samples_per_code` — Algorithm 1 stage 3: s_j = Round(s · P̃[j] / Σ P̃), negative
  noisy counts clipped to 0 first (the paper prints s · P̃[j] without normalising);
- :func:`sample_without_replacement` — Algorithm A.4, negative noisy votes clipped to 0.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from benchmark.api import ClientBatch, Embedder


def code_index(codes: list[str], label: Any) -> int:
    """Position of ``label`` among ``codes``; -1 for a sample whose code is not listed (it
    then contributes a zero row: nothing to count, nothing to vote for)."""
    try:
        return codes.index(str(label))
    except ValueError:
        return -1


class CodeCounts:
    """Stage 2 on the clients: one one-hot row per sample (payload: ``{"codes": [...]}``)."""

    def __call__(self, batch: ClientBatch, payload: dict[str, Any]) -> np.ndarray:
        codes = list(payload["codes"])
        rows = np.zeros((len(batch), len(codes)))
        for row, client in enumerate(batch.clients):
            index = code_index(codes, client.labels[0])
            if index >= 0:
                rows[row, index] = 1.0
        return rows


class KNNVotes:
    """Algorithm A.2 on the clients: each sample's K nearest same-code candidates get a vote.

    The payload holds the candidates' embeddings (computed by the server from the public
    synthetic texts), their code positions, ``codes`` and ``k``. Voting happens once per
    run, so the samples' embeddings are computed here and not memoised (a memo would be
    kept in the pool's checkpoint). Rows are float32 (one row of |candidates| per sample).
    Ties go to the lower index.
    """

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder

    def __call__(self, batch: ClientBatch, payload: dict[str, Any]) -> np.ndarray:
        candidates = np.asarray(payload["embeddings"], dtype=np.float32)
        candidate_codes = np.asarray(payload["candidate_codes"])
        codes, k = list(payload["codes"]), int(payload["k"])
        clients = batch.clients
        embeddings = np.asarray(
            self.embedder.embed([c.texts[0] for c in clients]), dtype=np.float32
        ).reshape(len(clients), self.embedder.dim)
        votes = np.zeros((len(clients), len(candidates)), dtype=np.float32)
        for row, client in enumerate(clients):
            same_code = np.flatnonzero(candidate_codes == code_index(codes, client.labels[0]))
            if len(same_code):  # none for a code without candidates, or for no code (-1)
                distances = np.linalg.norm(candidates[same_code] - embeddings[row], axis=1)
                votes[row, same_code[np.argsort(distances, kind="stable")[:k]]] = 1.0
        return votes


def samples_per_code(noisy_profile: np.ndarray, total: int) -> np.ndarray:
    """Stage 3: ``total`` samples shared out ∝ the noisy profile, negatives clipped to 0.

    Rounded per code as the paper's Round(s · P̃[j]), so the sum may differ from ``total``
    by a few. A profile with no positive count (all noise) is shared out uniformly.
    """
    weights = np.clip(np.asarray(noisy_profile, dtype=float), 0.0, None)
    if weights.sum() <= 0:
        weights = np.ones_like(weights)
    return np.rint(total * weights / weights.sum()).astype(int)


def sample_without_replacement(
    weights: np.ndarray, rate: float, rng: np.random.Generator
) -> np.ndarray:
    """Algorithm A.4 for one code: M = min(max(1, ⌊r·n⌋), n) positions drawn one by one
    with probability ∝ the remaining weights (negatives clipped to 0), uniformly among the
    remaining ones once their weights are all 0."""
    remaining = np.clip(np.asarray(weights, dtype=float), 0.0, None)
    n = len(remaining)
    if n == 0:
        return np.zeros(0, dtype=int)
    chosen = []
    available = np.ones(n, dtype=bool)
    for _ in range(min(max(1, math.floor(rate * n + 1e-9)), n)):  # ⌊r·n⌋, float-safe
        w = np.where(available, remaining, 0.0)
        p = w / w.sum() if w.sum() > 0 else available / available.sum()
        pick = int(rng.choice(n, p=p))
        chosen.append(pick)
        available[pick] = False
    return np.array(chosen, dtype=int)
