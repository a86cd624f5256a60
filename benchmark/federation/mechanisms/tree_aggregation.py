"""Tree aggregation for DP-FTRL (``pool.open_tree`` / ``pool.tree_step``): disjoint
cohorts, one leaf per client, each tree node's noise drawn once; the whole tree is
recorded when it is opened (:class:`benchmark.federation.tree.TreeAggregator`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from benchmark.federation.client_calls import BatchFn, ClientCall, ClientFn, job_of
from benchmark.federation.mechanisms.entries import check_gaussian
from benchmark.federation.plain import plain_flag, plain_number
from benchmark.federation.tree import TreeAggregator
from benchmark.privacy.errors import PrivacyError
from benchmark.privacy.ledger import TREE_AGGREGATION, Release

if TYPE_CHECKING:
    from benchmark.federation.pool import ClientPool


def entry(
    noise_multiplier: float, clip_norm: float, leaves: int, name: str, dim: int, unit: str
) -> Release:
    """The whole tree: ``leaves`` leaves of sensitivity ``clip_norm``."""
    return Release(
        mechanism=TREE_AGGREGATION,
        noise_multiplier=noise_multiplier,
        sensitivity=clip_norm,
        sample_rate=1.0,
        count=leaves,
        label=name,
        unit=unit,
        dim=dim,
    )


def open_tree(
    pool: ClientPool,
    name: str,
    *,
    dim: int,
    clip_norm: float,
    noise_multiplier: float,
    cohort_size: int,
    max_leaves: int | None = None,
    every_client: bool = False,
) -> int:
    """Start a single-epoch tree (DP-FTRL): clients are shuffled once and split into
    disjoint cohorts of ``cohort_size``, so each client contributes to one leaf only.
    With ``every_client`` the cohorts share out all N clients instead (cohort_size or
    cohort_size + 1 each), so the N mod cohort_size a plain split leaves over take part
    too; the noise does not depend on the cohort. The whole tree (``max_leaves`` caps it)
    is recorded in the ledger now; returns its number of leaves."""
    dim = plain_number("dim", dim, integer=True)
    clip_norm = plain_number("clip_norm", clip_norm)
    noise_multiplier = plain_number("noise_multiplier", noise_multiplier)
    cohort_size = plain_number("cohort_size", cohort_size, integer=True)
    if max_leaves is not None:
        max_leaves = plain_number("max_leaves", max_leaves, integer=True)
    every_client = plain_flag("every_client", every_client)
    pool._unit_level("pool.open_tree")
    if check_gaussian(clip_norm, noise_multiplier, pool._allow_nonprivate):
        raise PrivacyError("tree aggregation is a private mechanism; use aggregate() instead")
    if not 1 <= cohort_size <= pool.num_clients:
        raise PrivacyError(f"cohort_size must be in [1, {pool.num_clients}], got {cohort_size}")
    leaves = pool.num_clients // cohort_size
    if max_leaves is not None:  # a shorter tree (fewer rounds) has fewer levels
        leaves = max(1, min(leaves, max_leaves))
    if every_client and pool.num_clients >= leaves * (cohort_size + 1):
        raise PrivacyError(
            f"every_client: {pool.num_clients} clients in {leaves} leaves would make cohorts "
            f"larger than cohort_size + 1 = {cohort_size + 1}"
        )
    release = entry(noise_multiplier, clip_norm, leaves, name, dim, pool._unit)

    def compute() -> int:
        order = pool._rng(2).permutation(pool.num_clients)
        taken = order if every_client else order[: leaves * cohort_size]
        cohorts = [part.tolist() for part in np.array_split(taken, leaves)]
        pool._trees[name] = TreeAggregator(
            dim=dim,
            clip_norm=clip_norm,
            noise_multiplier=noise_multiplier,
            cohorts=cohorts,
            seed=[pool._seed, pool._release_index, 3],
        )
        pool._record(release)
        return leaves

    args = {"name": name, "dim": dim, "clip_norm": clip_norm}
    args |= {"noise_multiplier": noise_multiplier, "cohort_size": cohort_size}
    args |= {"max_leaves": max_leaves, "every_client": every_client}
    return int(pool._delivered("open_tree", args, compute, release))


def tree_step(
    pool: ClientPool,
    name: str,
    client_fn: ClientFn | BatchFn,
    payload: Any = None,
    batched: bool = False,
) -> np.ndarray:
    """Add the next cohort's clipped sum as a leaf; return the noisy prefix sum so far."""
    batched = plain_flag("batched", batched)
    if name not in pool._trees:
        raise PrivacyError(f"no open tree named {name!r}")
    job = job_of(client_fn, payload)

    def compute() -> np.ndarray:
        tree = pool._trees[name]
        cohort = tree.next_cohort()
        key = (*tree.seed[1:], tree.step)
        call = ClientCall(job, cohort, tree.dim, batched, len(cohort), key)
        return tree.add_leaf(pool._checked_sum(call, tree.clip_norm, checked=True))

    args = {"name": name, "batched": batched}
    return pool._delivered("tree_step", args, compute)
