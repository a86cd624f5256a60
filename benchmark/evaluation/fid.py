"""Fréchet distance between synthetic and real texts in sentence-embedding space (paper 000).

Computed with an eigen-decomposition instead of ``scipy.linalg.sqrtm``: for PSD covariances
``tr sqrt(S1 S2) = sum sqrt(eig(S1^1/2 S2 S1^1/2))``, and the middle matrix is symmetric, so
``eigvalsh`` gives real eigenvalues (tiny negative ones from rounding are clipped to 0). This
is exact for singular covariances (fewer samples than dimensions) and needs no epsilon.
"""

from __future__ import annotations

import numpy as np

from benchmark.artifact import Artifact
from benchmark.evaluation.base import TEXT_KINDS, EvalContext, Metric


def gaussian_stats(features: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and (unbiased) covariance of row vectors, in float64."""
    x = np.asarray(features, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < 2:
        raise ValueError(f"need at least two feature vectors, got shape {x.shape}")
    return x.mean(axis=0), np.cov(x, rowvar=False)


def _psd_sqrt(matrix: np.ndarray) -> np.ndarray:
    values, vectors = np.linalg.eigh((matrix + matrix.T) / 2)
    return (vectors * np.sqrt(np.clip(values, 0.0, None))) @ vectors.T


def frechet_distance(
    mu1: np.ndarray, sigma1: np.ndarray, mu2: np.ndarray, sigma2: np.ndarray
) -> float:
    """||mu1 - mu2||^2 + tr(S1) + tr(S2) - 2 tr((S1 S2)^1/2) for PSD S1, S2."""
    root1 = _psd_sqrt(sigma1)
    middle = root1 @ sigma2 @ root1
    cross = np.sqrt(np.clip(np.linalg.eigvalsh((middle + middle.T) / 2), 0.0, None)).sum()
    diff = mu1 - mu2
    value = diff @ diff + np.trace(sigma1) + np.trace(sigma2) - 2.0 * cross
    return float(max(value, 0.0))


def fid_from_features(a: np.ndarray, b: np.ndarray) -> float:
    return frechet_distance(*gaussian_stats(a), *gaussian_stats(b))


class FID(Metric):
    """FID of the released texts against the real ``reference_part`` texts of the split.

    Both sides are seeded-shuffled and capped at ``max_samples``; features are the profile's
    embedder (all-MiniLM-L6-v2 in ``cpu``/``paper``, unit-normalised, as in paper 000).
    """

    name = "fid"
    kinds = TEXT_KINDS
    models = ("embedder",)

    def __init__(self, max_samples: int = 10_000, reference_part: str = "test") -> None:
        super().__init__(max_samples=max_samples, reference_part=reference_part)
        self.max_samples = max_samples
        self.reference_part = reference_part

    def compute(self, artifact: Artifact, ctx: EvalContext) -> dict[str, float]:
        synthetic, real = ctx.compared_sets(
            artifact, self.name, self.reference_part, self.max_samples
        )
        self.record(featurizer=ctx.profile.embedder().name)
        value = fid_from_features(ctx.embed(synthetic), ctx.embed(real))
        return {"fid": value, "n_synthetic": float(len(synthetic)), "n_real": float(len(real))}
