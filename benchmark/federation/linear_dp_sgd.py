"""DP-SGD of a linear Bradley–Terry / logistic model on per-unit feature rows (paper 003's
per-cluster reward models), as trusted harness code.

Each unit holds one row z (for DPPrefSyn, the projected embedding difference of chosen and
rejected); the loss is softplus(−θ·z) = −log σ(θ·z), the probability that the unit's
chosen response wins. The harness runs the whole loop, so a method's code never sees a
per-example gradient: every step draws a Poisson sample at ``sample_rate``, clips each
sampled gradient −σ(−θ·z)·z to L2 norm ``clip_norm``, adds N(0, (σ·clip)²) to their sum,
and takes an SGD step of the sum over ``expected_batch`` (opacus's normalisation by the
expected, public batch size). Units outside the trained part of a partition have z = 0,
hence a zero gradient: sampling everyone at ``sample_rate`` samples the part's members at
that rate, and nobody else contributes.
"""

from __future__ import annotations

import numpy as np


def logistic_dp_sgd(
    rows: np.ndarray,
    init: np.ndarray,
    *,
    noise_multiplier: float,
    clip_norm: float,
    sample_rate: float,
    steps: int,
    lr: float,
    expected_batch: float,
    rng: np.random.Generator,
) -> np.ndarray:
    """θ after ``steps`` DP-SGD steps from ``init`` (no noise when ``noise_multiplier`` is 0)."""
    theta = np.asarray(init, dtype=np.float64).copy()
    for _ in range(steps):
        batch = rows[rng.random(len(rows)) < sample_rate]
        margins = batch @ theta
        grads = -(0.5 * (1.0 - np.tanh(margins / 2)))[:, None] * batch  # −σ(−m)·z, stable
        norms = np.linalg.norm(grads, axis=1)
        grads *= np.minimum(1.0, clip_norm / np.maximum(norms, 1e-12))[:, None]
        total = grads.sum(axis=0)
        if noise_multiplier > 0:
            total += rng.normal(0.0, noise_multiplier * clip_norm, size=theta.shape)
        theta -= lr * total / expected_batch
    return theta
