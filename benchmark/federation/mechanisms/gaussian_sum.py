"""The Gaussian sum (``pool.aggregate``): every sampled unit's row clipped to L2 norm
``clip_norm``, summed, plus N(0, (noise_multiplier·clip_norm)²) per coordinate; Poisson
sampling at ``sample_rate`` (or every unit)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from benchmark.federation.client_calls import BatchFn, ClientCall, ClientFn, job_of
from benchmark.federation.mechanisms.entries import check_gaussian, gaussian_entry
from benchmark.federation.plain import plain_flag, plain_number
from benchmark.privacy.errors import PrivacyError
from benchmark.privacy.ledger import Release
from benchmark.protocol.operations import Aggregate

if TYPE_CHECKING:
    from benchmark.federation.pool import ClientPool


def entry(
    nonprivate: bool,
    noise_multiplier: float,
    clip_norm: float,
    sample_rate: float,
    label: str,
    dim: int,
    unit: str,
) -> Release:
    """One (subsampled) Gaussian release of sensitivity ``clip_norm``."""
    return gaussian_entry(
        nonprivate,
        noise_multiplier,
        clip_norm,
        sample_rate,
        1,
        label,
        dim,
        unit,
        sensitivity=clip_norm,
    )


def noised(total: np.ndarray, std: float, rng: np.random.Generator) -> np.ndarray:
    """The clipped sum plus N(0, std²) per coordinate."""
    return total + rng.normal(0.0, std, size=total.shape[0])


def aggregate(
    pool: ClientPool,
    client_fn: ClientFn | BatchFn,
    payload: Any = None,
    *,
    dim: int,
    clip_norm: float,
    noise_multiplier: float,
    sample_rate: float = 1.0,
    label: str,
    batched: bool = False,
) -> Aggregate:
    """Run ``client_fn`` on the sampled clients; return the clipped, noised sum.

    Noise std is ``noise_multiplier * clip_norm`` per coordinate. With ``batched``,
    ``client_fn`` takes a :class:`ClientBatch` and returns one row per client.
    """
    dim = plain_number("dim", dim, integer=True)
    clip_norm = plain_number("clip_norm", clip_norm)
    noise_multiplier = plain_number("noise_multiplier", noise_multiplier)
    sample_rate = plain_number("sample_rate", sample_rate)
    batched = plain_flag("batched", batched)
    pool._unit_level("pool.aggregate")
    nonprivate = check_gaussian(clip_norm, noise_multiplier, pool._allow_nonprivate)
    if not 0 < sample_rate <= 1:
        raise PrivacyError(f"sample_rate must be in (0, 1], got {sample_rate}")
    release = entry(nonprivate, noise_multiplier, clip_norm, sample_rate, label, dim, pool._unit)
    job = job_of(client_fn, payload)
    expected = sample_rate * pool.num_clients

    def compute() -> tuple[np.ndarray, float]:
        indices = pool._sample(sample_rate)
        call = ClientCall(job, indices, dim, batched, expected, (pool._release_index,))
        total = pool._checked_sum(call, clip_norm, checked=not nonprivate)
        if not nonprivate:
            total = noised(total, noise_multiplier * clip_norm, pool._rng(1))
        pool._record(release)
        return total, expected

    args = {"dim": dim, "clip_norm": clip_norm, "noise_multiplier": noise_multiplier}
    args |= {"sample_rate": sample_rate, "label": label, "batched": batched}
    total, expected = pool._delivered("aggregate", args, compute, release)
    return Aggregate(total, expected)
