"""DP preference fine-tuning (``pool.dp_preference_finetune``, paper 003's DP-FT): one
stage (SFT or DPO) of the profile's preference policy trained by DP-SGD on the tuples of
one part of a partition, per-tuple clipping in the harness's per-example loop
(:mod:`benchmark.federation.preference_dp_sgd`)."""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import numpy as np

from benchmark.federation.mechanisms import partition as partitions
from benchmark.federation.mechanisms.local_dp_finetune import dp_sgd_steps, steps_entry
from benchmark.federation.plain import plain_number
from benchmark.privacy.errors import PrivacyError

if TYPE_CHECKING:
    from benchmark.federation.pool import ClientPool


def dp_preference_finetune(
    pool: ClientPool,
    weights: dict[str, Any],
    *,
    stage: str,
    partition: str,
    part: int,
    noise_multiplier: float,
    clip_norm: float,
    sample_rate: float,
    batch_size: float,
    steps: int,
    lr: float,
    beta: float,
    max_completion_tokens: int,
    label: str,
) -> dict[str, Any]:
    """One stage of paper 003's DP-FT on the tuples of one part of ``partition``: the
    profile's preference policy loaded with ``weights`` (a state dict), trained here by
    DP-SGD (``stage`` ``sft`` or ``dpo``; per-tuple clipping, Gaussian noise, Adam on the
    noisy gradients); returns the new weights. The parts are disjoint, so the SFT and DPO
    halves compose in parallel."""
    from benchmark.federation.local_dp_sgd import plain_weights
    from benchmark.federation.preference_dp_sgd import STAGES, finetune_on_preferences
    from benchmark.preference_training import trainable_copy
    from benchmark.profiles.seeding import seeded

    pool._unit_level("pool.dp_preference_finetune")
    weights = plain_weights(weights)
    if stage not in STAGES:
        raise PrivacyError(f"stage must be one of {STAGES}, got {stage!r}")
    part_members = partitions.members(pool, partition, plain_number("part", part, integer=True))
    config, nonprivate = dp_sgd_steps(
        pool, noise_multiplier, clip_norm, sample_rate, batch_size, steps, lr
    )
    beta = plain_number("beta", beta)
    max_completion_tokens = plain_number(
        "max_completion_tokens", max_completion_tokens, integer=True
    )
    if pool._policy is None:
        raise PrivacyError("this pool has no preference policy (the runner gives it one)")
    policy = pool._policy
    release = steps_entry(pool, config, nonprivate, label, partition=partition, part=int(part))

    def compute() -> dict[str, Any]:
        generator = policy()
        model = trainable_copy(generator.model)
        model.load_state_dict(weights, strict=True)
        records = [pool._records[u][0] for u in np.flatnonzero(part_members)]
        start = time.perf_counter()
        rng = pool._rng(4)
        with seeded(int(rng.integers(2**62))):  # dropout: from the secret seed too
            finetune_on_preferences(
                model,
                generator.tokenizer,
                records,
                stage=stage,
                beta=beta,
                max_completion_tokens=max_completion_tokens,
                steps=config,
                rng=rng,
            )
        trained = {k: v.detach().cpu() for k, v in model.state_dict().items()}
        size = sum(t.numel() for t in weights.values())
        # the method's declared expected batch, not q·|part|: a part's size is private
        pool.costs.add(config.batch_size, size, 0, size, time.perf_counter() - start)
        pool._record(release)
        return trained

    args = {**asdict(config), "stage": stage, "partition": partition, "part": int(part)}
    args |= {"beta": beta, "max_completion_tokens": max_completion_tokens, "label": label}
    return pool._delivered("dp_preference_finetune", args, compute, release)
