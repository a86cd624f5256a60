"""DP-PCA (``pool.dp_pca``, paper 003): rows clipped to L2 norm 1, their exact covariance,
and k components drawn by the exponential mechanism (Amin et al. 2019) with a Bingham
sampler (:mod:`benchmark.federation.dp_pca`); ε-DP (pure)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from benchmark.federation.client_calls import BatchFn, ClientFn, job_of
from benchmark.federation.dp_pca import top_eigenvectors
from benchmark.federation.mechanisms.entries import check_pure, pure_entry
from benchmark.federation.plain import plain_flag, plain_number
from benchmark.privacy.errors import PrivacyError
from benchmark.privacy.ledger import EXPONENTIAL

if TYPE_CHECKING:
    from benchmark.federation.pool import ClientPool


def dp_pca(
    pool: ClientPool,
    client_fn: ClientFn | BatchFn,
    payload: Any = None,
    *,
    dim: int,
    components: int,
    epsilon: float,
    label: str,
    batched: bool = False,
) -> np.ndarray:
    """A (dim, components) orthonormal basis of the units' vectors' top principal
    directions: the vectors are clipped to L2 norm 1 and the components drawn by the
    exponential mechanism, ε-DP (pure). Uncentred: a caller that wants centring releases a
    mean first and subtracts it client side. ``epsilon=inf`` gives the exact top
    eigenvectors (non-private runs)."""
    components = plain_number("components", components, integer=True)
    dim, epsilon = plain_number("dim", dim, integer=True), plain_number("epsilon", epsilon)
    if not 1 <= components <= dim:
        raise PrivacyError(f"components must be in [1, dim={dim}], got {components}")
    batched = plain_flag("batched", batched)
    pool._unit_level("pool.dp_pca")
    nonprivate = check_pure(epsilon, 1.0, pool._allow_nonprivate)
    release = pure_entry(nonprivate, EXPONENTIAL, epsilon, 1.0, label, dim, pool._unit)
    job = job_of(client_fn, payload)

    def compute() -> np.ndarray:
        rows = pool._checked_rows(job, dim, batched, not nonprivate)
        norms = np.linalg.norm(rows, axis=1)
        rows *= np.minimum(1.0, 1.0 / np.maximum(norms, 1e-12))[:, None]
        basis = top_eigenvectors(rows.T @ rows, components, epsilon, pool._rng(1))
        pool._record(release)
        return basis

    args = {"dim": dim, "components": components, "epsilon": epsilon}
    args |= {"label": label, "batched": batched}
    return pool._delivered("dp_pca", args, compute, release)
