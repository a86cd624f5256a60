"""The Laplace sum (``pool.laplace_aggregate``, paper 003's histograms): every unit's row
clipped to L1 norm ``l1_bound``, summed, plus Laplace noise of scale ``l1_bound``/ε per
coordinate: ε-DP (pure) under add/remove of a unit."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from benchmark.federation.client_calls import BatchFn, ClientFn, job_of
from benchmark.federation.mechanisms.entries import check_pure, pure_entry
from benchmark.federation.plain import plain_flag, plain_number
from benchmark.privacy.ledger import LAPLACE

if TYPE_CHECKING:
    from benchmark.federation.pool import ClientPool


def l1_clipped_sum(rows: np.ndarray, l1_bound: float) -> np.ndarray:
    """The rows, each scaled to L1 norm at most ``l1_bound``, summed."""
    norms = np.abs(rows).sum(axis=1)
    return np.minimum(1.0, l1_bound / np.maximum(norms, 1e-12)) @ rows


def laplace_aggregate(
    pool: ClientPool,
    client_fn: ClientFn | BatchFn,
    payload: Any = None,
    *,
    dim: int,
    l1_bound: float,
    epsilon: float,
    label: str,
    batched: bool = False,
) -> np.ndarray:
    """Every unit's vector clipped to L1 norm ``l1_bound``, summed, plus Laplace noise
    of scale ``l1_bound``/ε per coordinate: ε-DP (pure) under add/remove of a unit.
    ``epsilon=inf`` is the exact sum, in a non-private run only."""
    l1_bound = plain_number("l1_bound", l1_bound)
    dim, epsilon = plain_number("dim", dim, integer=True), plain_number("epsilon", epsilon)
    batched = plain_flag("batched", batched)
    pool._unit_level("pool.laplace_aggregate")
    nonprivate = check_pure(epsilon, l1_bound, pool._allow_nonprivate)
    release = pure_entry(nonprivate, LAPLACE, epsilon, l1_bound, label, dim, pool._unit)
    job = job_of(client_fn, payload)

    def compute() -> np.ndarray:
        rows = pool._checked_rows(job, dim, batched, not nonprivate, bound=l1_bound, order=1)
        total = l1_clipped_sum(rows, l1_bound)
        if not nonprivate:
            total = total + pool._rng(1).laplace(0.0, l1_bound / epsilon, size=dim)
        pool._record(release)
        return total

    args = {"dim": dim, "l1_bound": l1_bound, "epsilon": epsilon}
    args |= {"label": label, "batched": batched}
    return pool._delivered("laplace_aggregate", args, compute, release)
