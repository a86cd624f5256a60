"""Local DP fine-tuning (``pool.local_dp_finetune``, paper 001 Alg. A.3): one FedAvg round
in which every client of the named groups fine-tunes the profile's conditional LM on its
own samples by DP-SGD (:mod:`benchmark.federation.local_dp_sgd`), all of it harness code
run in the pool's process; the server gets the mean delta."""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from benchmark.federation.mechanisms import client_groups
from benchmark.federation.mechanisms.entries import check_gaussian, gaussian_entry
from benchmark.federation.plain import plain_number
from benchmark.privacy.errors import PrivacyError
from benchmark.privacy.ledger import Release

if TYPE_CHECKING:
    from benchmark.federation.pool import ClientPool


def dp_sgd_steps(
    pool: ClientPool,
    noise_multiplier: float,
    clip_norm: float,
    sample_rate: float,
    batch_size: float,
    steps: int,
    lr: float,
) -> tuple[Any, bool]:
    """The checked numbers of a harness DP-SGD run, and whether it is non-private."""
    from benchmark.federation.local_dp_sgd import DPSGDSteps

    config = DPSGDSteps(
        noise_multiplier=plain_number("noise_multiplier", noise_multiplier),
        clip_norm=plain_number("clip_norm", clip_norm),
        sample_rate=plain_number("sample_rate", sample_rate),
        batch_size=plain_number("batch_size", batch_size),
        steps=plain_number("steps", steps, integer=True),
        lr=plain_number("lr", lr),
    )
    nonprivate = check_gaussian(config.clip_norm, config.noise_multiplier, pool._allow_nonprivate)
    if not 0 < config.sample_rate <= 1 or config.steps < 1 or config.batch_size <= 0:
        raise PrivacyError("DP-SGD needs sample_rate in (0, 1], batch_size > 0 and steps >= 1")
    return config, nonprivate


def steps_entry(
    pool: ClientPool, config: Any, nonprivate: bool, label: str, **where: Any
) -> Release:
    """``config.steps`` compositions of the subsampled Gaussian (``where``: the groups, or
    the partition and part, the steps ran on)."""
    return gaussian_entry(
        nonprivate,
        config.noise_multiplier,
        config.clip_norm,
        config.sample_rate,
        config.steps,
        label,
        0,
        pool._unit,
        **where,
    )


def local_dp_finetune(
    pool: ClientPool,
    weights: dict[str, Any],
    *,
    prompt_template: str,
    groups: list[str],
    noise_multiplier: float,
    clip_norm: float,
    sample_rate: float,
    batch_size: float,
    steps: int,
    lr: float,
    max_length: int,
    label: str,
) -> dict[str, Any]:
    """One FedAvg round of local DP-SGD (paper 001 Alg. A.3) on the clients of ``groups``.

    Every client fine-tunes the profile's conditional LM, starting from ``weights`` (a
    state dict), on its own samples for ``steps`` DP-SGD steps: Poisson batches at
    ``sample_rate``, per-sample clipping to ``clip_norm``, Gaussian noise, SGD at
    ``lr`` over the public expected ``batch_size``, loss −log p(x | c) with
    c = ``prompt_template`` filled with the sample's label. The whole training is harness
    code run in this (trusted) process: the method supplies tensors and numbers only.
    Returns the mean of the clients' model deltas (each already DP for its client's
    samples; the mean is post-processing). Records ``steps`` compositions of the
    subsampled Gaussian for the groups.
    """
    from benchmark.federation.local_dp_sgd import LocalDPSGD, plain_weights

    names, clients = client_groups.members(pool, groups)
    weights = plain_weights(weights)  # checked once, before any client trains on them
    if type(prompt_template) is not str:
        raise PrivacyError("local DP-SGD needs the prompt template as a plain string")
    steps_config, nonprivate = dp_sgd_steps(
        pool, noise_multiplier, clip_norm, sample_rate, batch_size, steps, lr
    )
    config = LocalDPSGD(
        **asdict(steps_config),
        prompt_template=prompt_template,
        max_length=plain_number("max_length", max_length, integer=True),
    )
    if pool._local_trainer is None:
        raise PrivacyError("this pool has no local trainer (the runner gives it one)")
    trainer = pool._local_trainer
    release = steps_entry(pool, config, nonprivate, label, groups=names)

    def compute() -> dict[str, Any]:
        start = time.perf_counter()
        total: dict[str, Any] = {}
        for c in clients:  # a running sum: one client's delta in memory at a time
            delta = trainer.finetune(
                weights,
                [pool._records[u][0] for u in pool._silos[c]],
                config,
                seed=int(pool._rng(4, c).integers(2**63)),
            )
            for name, tensor in delta.items():
                total[name] = total[name] + tensor if name in total else tensor
        mean = {name: tensor / len(clients) for name, tensor in total.items()}
        pool.costs.add(
            len(clients),
            sum(t.numel() for t in weights.values()),
            0,
            sum(t.numel() for t in mean.values()),
            time.perf_counter() - start,
        )
        pool._record(release)
        return mean

    args = {**asdict(config), "groups": names, "label": label}
    return pool._delivered("local_dp_finetune", args, compute, release)
