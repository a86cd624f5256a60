"""DP-PCA by iterative eigenvector sampling (Amin, Dick, Kulesza, Muñoz Medina and
Vassilvitskii 2019, Algorithm 1), the mechanism behind paper 003's ``opendp`` PCA.

Trusted harness code: the pool (:meth:`benchmark.federation.pool.ClientPool.dp_pca`) gives
it the exact covariance C = Σ x xᵀ of rows clipped to L2 norm 1, and the secret-seeded
generator. Under add/remove of one row, uᵀCu moves by at most ‖x‖² ≤ 1 for every unit
vector u, so sampling u with density ∝ exp(ε/2 · uᵀCu) on the sphere is the exponential
mechanism, ε-DP. Component i is drawn in the orthogonal complement of the earlier ones
(from C projected there) with ε/k each, so the k components are ε-DP by composition.

Why not the libraries: opendp 0.16's Bingham sampler divides by (uᵀΩu)^(d/2) where Kent,
Ganeiber and Mardia's rejection test multiplies, so it samples the wrong distribution
(and stalls at large n·ε); the version the paper pinned accepted every proposal. The
sampler here is Kent et al. (2018)'s angular-central-Gaussian envelope, in the eigenbasis.
Unlike opendp, no budget goes to eigenvalues (DPPrefSyn never uses them) and the mean is
a separate release (the pool's Laplace sum), so a caller spends ε only on what it uses.
"""

from __future__ import annotations

import math

import numpy as np

# Proposals per rejection-sampling batch; acceptance: docs/measurements/working-scale.md#dp_pca
BATCH = 256
MAX_PROPOSALS = 1_000_000


def sample_bingham(eigenvalues: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A unit vector x with density ∝ exp(Σ_j λ_j x_j²) on the sphere, in the eigenbasis.

    Kent, Ganeiber and Mardia (2018): write the density as exp(−xᵀAx) with A = diag(λ_max
    − λ) ≥ 0 (the shift changes nothing on the sphere); propose x = y/‖y‖ with y ~ N(0,
    Ω⁻¹), Ω = I + 2A/b, b the root of Σ_j 1/(b + 2a_j) = 1; accept with probability
    exp(−t)(1 + 2t/b)^(d/2) / M, t = xᵀAx, whose maximum M = exp(−(d−b)/2)(d/b)^(d/2) is
    at t = (d−b)/2.
    """
    lam = np.asarray(eigenvalues, dtype=np.float64)
    d = lam.size
    a = lam.max() - lam
    b = _envelope_b(a)
    scale = 1.0 / np.sqrt(1.0 + 2.0 * a / b)
    log_m = -(d - b) / 2 + (d / 2) * math.log(d / b)
    for _ in range(MAX_PROPOSALS // BATCH):
        y = rng.standard_normal((BATCH, d)) * scale
        x = y / np.linalg.norm(y, axis=1, keepdims=True)
        t = (x * x) @ a
        log_ratio = -t + (d / 2) * np.log1p(2.0 * t / b) - log_m
        accepted = np.flatnonzero(np.log(rng.random(BATCH)) < log_ratio)
        if accepted.size:
            return x[accepted[0]]
    raise RuntimeError(f"Bingham sampler: no proposal accepted in {MAX_PROPOSALS}")


def _envelope_b(a: np.ndarray) -> float:
    """The root b in (0, d] of Σ_j 1/(b + 2a_j) = 1 (a ≥ 0 with min 0, so it exists)."""
    from scipy.optimize import brentq

    d = a.size
    if not np.any(a > 0):
        return float(d)
    return float(brentq(lambda b: np.sum(1.0 / (b + 2.0 * a)) - 1.0, 1e-12, d, xtol=1e-12))


def top_eigenvectors(
    covariance: np.ndarray, components: int, epsilon: float, rng: np.random.Generator
) -> np.ndarray:
    """A (dim, components) orthonormal matrix; ε-DP for covariances of unit-clipped rows,
    exact (the top eigenvectors) when ``epsilon`` is infinite."""
    cov = np.asarray(covariance, dtype=np.float64)
    dim = cov.shape[0]
    if math.isinf(epsilon):
        values, vectors = np.linalg.eigh(cov)
        return vectors[:, np.argsort(values)[::-1][:components]]
    per_component = epsilon / components
    basis = np.eye(dim)  # orthonormal basis of the complement of the components so far
    chosen = []
    for _ in range(components):
        projected = basis.T @ cov @ basis
        values, vectors = np.linalg.eigh((projected + projected.T) / 2)
        x = vectors @ sample_bingham(per_component / 2 * values, rng)
        chosen.append(basis @ x)
        basis = basis @ _complement(x)
    return np.stack(chosen, axis=1)


def _complement(x: np.ndarray) -> np.ndarray:
    """An orthonormal basis (m, m−1) of the hyperplane orthogonal to the unit vector x: the
    Householder reflection H mapping x to ∓e₀ has its other columns orthogonal to x."""
    v = x.copy()
    v[0] += math.copysign(1.0, x[0])
    householder = np.eye(x.size) - 2.0 * np.outer(v, v) / (v @ v)
    return householder[:, 1:]
