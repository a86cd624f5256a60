"""DP-SGD of a linear Bradley–Terry model (``pool.dp_logistic_sgd``, paper 003): one
feature row per unit, computed client side once; the whole loop runs in the pool
(:func:`benchmark.federation.linear_dp_sgd.logistic_dp_sgd`), optionally on one part of a
partition (the others' rows zeroed by the pool, not by the method)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from benchmark.federation.client_calls import BatchFn, ClientFn, job_of
from benchmark.federation.linear_dp_sgd import logistic_dp_sgd
from benchmark.federation.mechanisms import partition as partitions
from benchmark.federation.mechanisms.entries import check_gaussian, gaussian_entry
from benchmark.federation.plain import plain_flag, plain_number
from benchmark.privacy.errors import PrivacyError

if TYPE_CHECKING:
    from benchmark.federation.pool import ClientPool


def dp_logistic_sgd(
    pool: ClientPool,
    client_fn: ClientFn | BatchFn,
    payload: Any = None,
    *,
    dim: int,
    init: list[float],
    noise_multiplier: float,
    clip_norm: float,
    sample_rate: float,
    steps: int,
    lr: float,
    expected_batch: float,
    label: str,
    partition: str | None = None,
    part: int | None = None,
    batched: bool = False,
) -> np.ndarray:
    """DP-SGD of a linear Bradley–Terry model θ on the units' feature rows (one per
    unit, computed client side once), run here; returns θ. With a ``partition``, only
    ``part``'s members contribute (the others' rows are zeroed here) and the release is
    recorded on that part. Poisson sampling at ``sample_rate`` over ``steps`` steps;
    ``noise_multiplier`` 0 only in a non-private run."""
    dim = plain_number("dim", dim, integer=True)
    theta = np.array([plain_number("init", v) for v in init], dtype=np.float64)
    noise_multiplier = plain_number("noise_multiplier", noise_multiplier)
    clip_norm = plain_number("clip_norm", clip_norm)
    sample_rate = plain_number("sample_rate", sample_rate)
    steps = plain_number("steps", steps, integer=True)
    lr = plain_number("lr", lr)
    expected_batch = plain_number("expected_batch", expected_batch)
    pool._unit_level("pool.dp_logistic_sgd")
    if theta.shape != (dim,) or not np.all(np.isfinite(theta)):
        raise PrivacyError(f"init must be {dim} finite numbers")
    if steps < 1 or not (math.isfinite(lr) and math.isfinite(expected_batch)):
        raise PrivacyError("steps must be >= 1, lr and expected_batch finite")
    if expected_batch <= 0 or not 0 < sample_rate <= 1:
        raise PrivacyError("expected_batch must be > 0 and sample_rate in (0, 1]")
    nonprivate = check_gaussian(clip_norm, noise_multiplier, pool._allow_nonprivate)
    if nonprivate and not math.isfinite(clip_norm):
        raise PrivacyError("DP-SGD needs a finite clip_norm")
    members = None
    if partition is not None or part is not None:
        members = partitions.members(pool, partition, plain_number("part", part, integer=True))
    batched = plain_flag("batched", batched)
    release = gaussian_entry(
        nonprivate,
        noise_multiplier,
        clip_norm,
        sample_rate,
        steps,
        label,
        dim,
        pool._unit,
        partition=partition or "",
        part=-1 if members is None else int(part),  # type: ignore[arg-type]
    )
    job = job_of(client_fn, payload)

    def compute() -> np.ndarray:
        rows = pool._checked_rows(job, dim, batched, not nonprivate, bound=clip_norm)
        if members is not None:
            rows[~members] = 0.0
        trained = logistic_dp_sgd(
            rows,
            theta,
            noise_multiplier=noise_multiplier,
            clip_norm=clip_norm,
            sample_rate=sample_rate,
            steps=steps,
            lr=lr,
            expected_batch=expected_batch,
            rng=pool._rng(1),
        )
        pool._record(release)
        return trained

    args = {"dim": dim, "init": theta.tolist(), "noise_multiplier": noise_multiplier}
    args |= {"clip_norm": clip_norm, "sample_rate": sample_rate, "steps": steps, "lr": lr}
    args |= {"expected_batch": expected_batch, "label": label, "batched": batched}
    args |= {"partition": release.partition, "part": release.part}
    return pool._delivered("dp_logistic_sgd", args, compute, release)
