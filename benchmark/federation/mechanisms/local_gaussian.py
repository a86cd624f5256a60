"""Local Gaussian releases (``pool.local_gaussian``, paper 001): each client of the named
groups releases its own noisy vector (its samples' rows clipped and summed, its own
Gaussian noise); the server gets their sum. DP per client's samples."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from benchmark.federation.client_calls import BatchFn, ClientCall, job_of
from benchmark.federation.mechanisms import client_groups
from benchmark.federation.mechanisms.entries import check_gaussian, gaussian_entry
from benchmark.federation.plain import plain_number
from benchmark.protocol.jobs import BATCH
from benchmark.protocol.operations import Aggregate

if TYPE_CHECKING:
    from benchmark.federation.pool import ClientPool


def local_gaussian(
    pool: ClientPool,
    client_fn: BatchFn,
    payload: Any = None,
    *,
    dim: int,
    clip_norm: float,
    noise_multiplier: float,
    groups: list[str],
    label: str,
) -> Aggregate:
    """Each client of ``groups`` releases its own noisy vector; the server gets their sum.

    ``client_fn`` is batched over one client's samples (a :class:`ClientBatch` of
    one-record clients) and returns one row per sample. The pool clips every row to
    ``clip_norm`` (the L2 sensitivity of a client's vector to one of its samples under
    add/remove), sums a client's rows, adds that client's own Gaussian noise of std
    ``noise_multiplier * clip_norm``, and returns the sum over clients (paper 001's
    P̃ = Σ P̃_i and ṽ = Σ ṽ_i). Rows are checked for independence across the release's
    samples. One ledger entry, for the named groups; ``expected_count`` is the number
    of clients.
    """
    dim = plain_number("dim", dim, integer=True)
    clip_norm = plain_number("clip_norm", clip_norm)
    noise_multiplier = plain_number("noise_multiplier", noise_multiplier)
    names, clients = client_groups.members(pool, groups)
    nonprivate = check_gaussian(clip_norm, noise_multiplier, pool._allow_nonprivate)
    release = gaussian_entry(
        nonprivate, noise_multiplier, clip_norm, 1.0, 1, label, dim, pool._unit, groups=names
    )
    job = job_of(client_fn, payload)

    def compute() -> tuple[np.ndarray, float]:
        population = [u for c in clients for u in pool._silos[c]]
        chosen = pool._choose([] if nonprivate else population)
        check = pool._recheck(BATCH, job, chosen, clip_norm)
        total, seconds = np.zeros(dim), 0.0
        for c in clients:
            call = ClientCall(job, pool._silos[c], dim, True, 1, (pool._release_index, c))
            rows, took = pool._clipped_sum(call, clip_norm, check)
            total += rows
            seconds += took
            if not nonprivate:
                total += pool._rng(1, c).normal(0.0, noise_multiplier * clip_norm, size=dim)
        check.finish(seconds)
        pool._record(release)
        return total, float(len(clients))

    args = {"dim": dim, "clip_norm": clip_norm, "noise_multiplier": noise_multiplier}
    args |= {"groups": names, "label": label}
    total, expected = pool._delivered("local_gaussian", args, compute, release)
    return Aggregate(total, expected)
