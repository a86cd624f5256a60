"""DPPrefSyn's client-side functions: what each private preference tuple computes.

Each privacy unit holds one tuple (x, a⁺, a⁻) (paper 003's unit, Def. 3.1). The functions
are batched and keep the unit's embedding difference in its client memo, so the embedder
runs once per unit per run; they send back only the rows the pool asks for (the pool clips
and noises them; the rows never reach server code). Server code builds them with public
or already-released values only: the embedder, the DP mean μ, the DP projection P, the
DP centroids.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from benchmark.api import ClientBatch, ClientData, Embedder

# Projected rows at most this long are dropped (the released code's ``norm <= 1e-8``).
ZERO_NORM = 1e-8


@dataclass
class Differences:
    """d = ψ(prompt + chosen) − ψ(prompt + rejected), per unit (Algorithm 1, line 2; the
    released code embeds the prompt and response concatenated)."""

    embedder: Embedder

    def _compute(self, clients: list[ClientData]) -> np.ndarray:
        records = [c.records[0] for c in clients]
        chosen = self.embedder.embed([r["prompt"] + r["chosen"] for r in records])
        rejected = self.embedder.embed([r["prompt"] + r["rejected"] for r in records])
        return np.asarray(chosen, dtype=np.float64) - np.asarray(rejected, dtype=np.float64)

    def rows(self, batch: ClientBatch) -> np.ndarray:
        return batch.memo_rows(f"dpprefsyn:differences:{self.embedder.name}", self._compute)

    def __call__(self, batch: ClientBatch, payload: object) -> np.ndarray:
        return self.rows(batch)


def project(
    vectors: np.ndarray, mean: np.ndarray, basis: np.ndarray, normalize: bool
) -> np.ndarray:
    """(v − μ)·P, each row L2-normalised when ``normalize``; rows of norm ≤ 1e-8 are 0.
    The private differences and the public candidates' embeddings go through the same map
    (the released code centres and normalises both)."""
    z = (np.asarray(vectors, dtype=np.float64) - mean) @ basis
    norms = np.linalg.norm(z, axis=1, keepdims=True)
    if normalize:
        z = z / np.maximum(norms, ZERO_NORM)
    return np.where(norms > ZERO_NORM, z, 0.0)


@dataclass
class Projected:
    """z = (d − μ)·P, L2-normalised when ``normalize`` (§1.5 item 1: the released code;
    the paper writes z = Pᵀd); rows of norm ≤ 1e-8 become 0 (dropped)."""

    differences: Differences
    mean: np.ndarray
    basis: np.ndarray
    normalize: bool

    def rows(self, batch: ClientBatch) -> np.ndarray:
        return project(self.differences.rows(batch), self.mean, self.basis, self.normalize)

    def __call__(self, batch: ClientBatch, payload: object) -> np.ndarray:
        return self.rows(batch)


@dataclass
class Centred:
    """d − μ: the rows DP-PCA sees when the projection is centred."""

    differences: Differences
    mean: np.ndarray

    def __call__(self, batch: ClientBatch, payload: object) -> np.ndarray:
        return self.differences.rows(batch) - self.mean


def nearest(points: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    distances = ((points[:, None, :] - centroids[None, :, :]) ** 2).sum(-1)
    return np.argmin(distances, axis=1)


@dataclass
class KMeansStep:
    """One DPLloyd iteration's client rows (Su et al. 2016, as diffprivlib's ``KMeans``):
    each kept unit's point, clipped to the box [−bound, bound]^p, is assigned to its nearest
    centroid; ``sums`` gives the point in that centroid's block of a K·p row, else the
    one-hot count row of length K. Dropped units send zeros."""

    projected: Projected
    centroids: np.ndarray
    bound: float
    sums: bool

    def __call__(self, batch: ClientBatch, payload: object) -> np.ndarray:
        z = self.projected.rows(batch)
        points = np.clip(z, -self.bound, self.bound)
        k, p = self.centroids.shape
        onehot = np.eye(k)[nearest(points, self.centroids)]
        onehot[~np.any(z != 0, axis=1)] = 0.0
        if not self.sums:
            return onehot
        return (onehot[:, :, None] * points[:, None, :]).reshape(len(z), k * p)


@dataclass
class ClusterOf:
    """The unit's cluster under the released centroids (−1 when dropped): the partition
    the per-cluster reward models train on."""

    projected: Projected
    centroids: np.ndarray
    bound: float

    def __call__(self, batch: ClientBatch, payload: object) -> np.ndarray:
        z = self.projected.rows(batch)
        k = nearest(np.clip(z, -self.bound, self.bound), self.centroids).astype(np.float64)
        return np.where(np.any(z != 0, axis=1), k, -1.0)[:, None]
