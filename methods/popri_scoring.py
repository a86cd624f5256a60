"""POPri's client scoring (paper 000, Algorithm 4) and preference-pair ranking (Alg. 1, l. 21-26).

A client's score for synthetic sample ``j`` is the mean cosine similarity between ``e_j`` and
the client's own sample embeddings. Because cosine similarity is linear in its unit-normalised
arguments, that mean equals ``<m_i, e_j / |e_j|>`` with ``m_i`` the mean of the client's unit
embeddings. So one round of scoring for every sampled client is a single float32 matrix
product ``M @ E_syn^T`` (clients x dim times dim x K*J), not a Python loop over clients. ``m_i``
depends only on the client's own texts and the (public) embedder, so each client computes it
once and keeps it in its client-side memo (``ClientBatch.memo_rows``) for later rounds.

The division by ``max(1, ||Scores||)`` of Algorithm 4 is the pool's per-client clipping at norm
1 (``ClientPool.aggregate(clip_norm=1.0)``); the pool also adds the Gaussian noise (Alg. 1,
l. 17) and records the release.

Per-client standardisation (``standardize=True``): the public reference code z-scores each
client's score vector over the K·J samples (subtract its mean, divide by its standard
deviation) before clipping; Algorithm 4 does not. It runs client side on the client's own
row before the pool clips, so it changes no sensitivity and costs no privacy. Its effect:
every client's row then has norm √(K·J) before clipping, so every client contributes a unit
vector that says only *which samples it prefers relative to its own average*, and clients
whose texts are close to every synthetic sample no longer dominate the sum. A row with zero
variance (a client indifferent to all samples) becomes all zeros.

Choice where the paper is silent: the client embeds its texts with the same embedder the
server used for the synthetic samples (Alg. 1, l. 4 and l. 13 use the same Γ), and both sides
re-normalise rows so the score is a cosine similarity even for an embedder whose outputs are
not exactly unit length.
"""

from __future__ import annotations

import numpy as np

from benchmark.api import ClientBatch, ClientData, Embedder


def unit_rows(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm (zero rows stay zero), as float32."""
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(norms, np.float32(1e-12))


def mean_unit_embeddings(embedder: Embedder, clients: list[ClientData]) -> np.ndarray:
    """Per client, the mean of its unit-normalised sample embeddings, float32 (n, dim).

    All clients' texts go through the embedder in one batched call (each text is embedded on
    its own, so no client's row depends on another client's data), then are averaged per
    client with one ``np.add.reduceat``.
    """
    texts = [client.texts for client in clients]
    counts = np.array([len(t) for t in texts])
    if np.any(counts == 0):
        raise ValueError("every client needs at least one text to score synthetic samples")
    vectors = unit_rows(embedder.embed([t for group in texts for t in group]))
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    return np.add.reduceat(vectors, starts, axis=0) / counts[:, None].astype(np.float32)


def similarity_scores(client_means: np.ndarray, synthetic: np.ndarray) -> np.ndarray:
    """Algorithm 4 before clipping, for many clients at once: one (n, K*J) float32 product."""
    return np.matmul(np.asarray(client_means, dtype=np.float32), unit_rows(synthetic).T)


def standardize_rows(scores: np.ndarray) -> np.ndarray:
    """Each row z-scored over its own entries; zero-variance rows become zeros (float32)."""
    scores = np.asarray(scores, dtype=np.float32)
    centred = scores - scores.mean(axis=1, keepdims=True)
    std = scores.std(axis=1, keepdims=True)
    return np.where(std > 0, centred / np.where(std > 0, std, 1), 0).astype(np.float32)


class SimilarityScorer:
    """The client-side function of a POPri round, for ``ClientPool.aggregate(batched=True)``.

    The broadcast payload is the (K*J, dim) array of synthetic embeddings; each sampled
    client returns its row of mean cosine similarities.
    """

    def __init__(self, embedder: Embedder, standardize: bool = False) -> None:
        self.embedder = embedder
        self.standardize = standardize
        self.memo_key = f"popri/mean_unit_embedding/{embedder.name}"

    def _means(self, clients: list[ClientData]) -> np.ndarray:
        return mean_unit_embeddings(self.embedder, clients)

    def __call__(self, batch: ClientBatch, synthetic: np.ndarray) -> np.ndarray:
        scores = similarity_scores(batch.memo_rows(self.memo_key, self._means), synthetic)
        return standardize_rows(scores) if self.standardize else scores


def preference_indices(
    scores: np.ndarray, num_prompts: int, samples_per_prompt: int, rejected_rank: int
) -> tuple[np.ndarray, np.ndarray]:
    """Flat indices of the chosen (rank 1) and rejected (rank ``rejected_rank``) sample of
    every prompt (Alg. 1, l. 21-26); sample ``j`` of prompt ``k`` sits at ``k * J + j``.

    Ranks are by descending score; ties keep generation order (stable sort).
    """
    if not 2 <= rejected_rank <= samples_per_prompt:
        raise ValueError(
            f"rejected_rank must be in [2, {samples_per_prompt}] (J), got {rejected_rank}"
        )
    table = np.asarray(scores, dtype=np.float64).reshape(num_prompts, samples_per_prompt)
    order = np.argsort(-table, axis=1, kind="stable")
    base = np.arange(num_prompts) * samples_per_prompt
    return base + order[:, 0], base + order[:, rejected_rank - 1]
