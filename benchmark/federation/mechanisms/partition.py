"""Partitions (paper 003): ``pool.define_partition`` has each unit compute its part client
side (independence-checked); the pool keeps the assignment and never returns it.
``pool.part_sizes`` releases the part counts with Laplace noise of scale 1/ε (a unit moves
one count by one). Releases on disjoint parts compose in parallel because the pool, not
the method, decides which units a part's release touches (:func:`members`)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from benchmark.federation.client_calls import BatchFn, ClientFn, job_of
from benchmark.federation.mechanisms.entries import check_pure, pure_entry
from benchmark.federation.plain import plain_flag, plain_number
from benchmark.privacy.errors import PrivacyError
from benchmark.privacy.ledger import LAPLACE, UNCHARGED, Release

if TYPE_CHECKING:
    from benchmark.federation.pool import ClientPool


def define_partition(
    pool: ClientPool,
    name: str,
    client_fn: ClientFn | BatchFn,
    payload: Any = None,
    *,
    parts: int,
    batched: bool = False,
) -> None:
    """Each unit computes, client side, which of ``parts`` parts it is in (its row: one
    number; anything else puts it in no part). The pool keeps the assignment and
    never returns it; releases on a part (:func:`part_sizes`, ``dp_logistic_sgd``)
    use only that part's units, so releases on different parts compose in parallel.
    A partition is fixed once defined, and the rows are independence-checked: a unit's
    part must depend on its own data only, or adding it could move others."""
    parts = plain_number("parts", parts, integer=True)
    pool._unit_level("pool.define_partition")
    if type(name) is not str or not name or name in pool._partitions:
        raise PrivacyError(f"a partition needs a new, non-empty name, got {name!r}")
    if parts < 1:
        raise PrivacyError(f"parts must be >= 1, got {parts}")
    batched = plain_flag("batched", batched)
    job = job_of(client_fn, payload)

    def compute() -> None:
        checked = not pool._allow_nonprivate
        values = pool._checked_rows(job, 1, batched, checked, exact=True)[:, 0]
        valid = (values == np.round(values)) & (values >= 0) & (values < parts)
        pool._partitions[name] = (parts, np.where(valid, values, -1).astype(np.int64))
        pool._release_index += 1

    args = {"name": name, "parts": parts, "batched": batched}
    pool._delivered("define_partition", args, compute)


def members(pool: ClientPool, partition: Any, part: int) -> np.ndarray:
    """The members of one part (a boolean mask over units)."""
    if type(partition) is not str or partition not in pool._partitions:
        raise PrivacyError(f"no partition named {partition!r}; define it first")
    parts, assignment = pool._partitions[partition]
    if not 0 <= part < parts:
        raise PrivacyError(f"partition {partition!r} has parts 0..{parts - 1}, got {part}")
    return assignment == part


def sizes_entry(
    pool: ClientPool, epsilon: float, parts: int, label: str
) -> tuple[Release, bool, bool]:
    """The part counts' ledger entry, and whether they are released exact (non-private)
    or uncharged (a ``guarantee: simulated`` run asking for ε = ∞)."""
    uncharged = math.isinf(epsilon) and pool._simulated and not pool._allow_nonprivate
    if uncharged:
        return Release(UNCHARGED, 0.0, 1.0, 1.0, 1, label, unit=pool._unit, dim=parts), False, True
    nonprivate = check_pure(epsilon, 1.0, pool._allow_nonprivate)
    release = pure_entry(nonprivate, LAPLACE, epsilon, 1.0, label, parts, pool._unit)
    return release, nonprivate, False


def part_sizes(pool: ClientPool, partition: str, *, epsilon: float, label: str) -> np.ndarray:
    """The number of units in each part, with Laplace noise of scale 1/ε: ε-DP.
    ``epsilon=inf`` releases the exact counts: recorded as a non-private release in a
    non-private run; in a ``guarantee: simulated`` run it is allowed uncharged (paper
    003's own accounting, which never privatised its cluster histogram) and recorded as
    such; refused in any formal private run."""
    epsilon = plain_number("epsilon", epsilon)
    pool._unit_level("pool.part_sizes")
    if type(partition) is not str or partition not in pool._partitions:
        raise PrivacyError(f"no partition named {partition!r}; define it first")
    parts, assignment = pool._partitions[partition]
    release, nonprivate, uncharged = sizes_entry(pool, epsilon, parts, label)

    def compute() -> np.ndarray:
        counts = np.bincount(assignment[assignment >= 0], minlength=parts).astype(np.float64)
        if not (nonprivate or uncharged):
            counts = counts + pool._rng(1).laplace(0.0, 1.0 / epsilon, size=parts)
        pool._record(release)
        return counts

    args = {"partition": partition, "epsilon": epsilon, "label": label}
    return pool._delivered("part_sizes", args, compute, release)
