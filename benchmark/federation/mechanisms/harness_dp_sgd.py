"""Harness DP-SGD (``pool.dp_sgd``): sample-level or central DP, one example per unit,
per-example clipping and noise by opacus in the pool's process
(:func:`benchmark.federation.dp_sgd.run_dp_sgd`). In process only: refused on the
isolated path, where it would run beside the method's code."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from benchmark.federation.clients import client_scope, seeded_rngs
from benchmark.federation.mechanisms.entries import check_gaussian
from benchmark.federation.plain import plain_number
from benchmark.privacy.errors import PrivacyError
from benchmark.privacy.ledger import SUBSAMPLED_GAUSSIAN, Release
from benchmark.protocol.jobs import ENCODE, output_rows

if TYPE_CHECKING:
    from benchmark.federation.pool import ClientPool

ENCODE_STREAM = 7  # the secret seed's stream of ``encode``'s seed


def dp_sgd(
    pool: ClientPool,
    model: Any,
    encode: Callable[[list[dict[str, Any]]], Any],
    loss_fn: Callable[[Any, Any], Any],
    *,
    noise_multiplier: float,
    clip_norm: float,
    batch_size: int,
    steps: int,
    lr: float,
    label: str,
) -> Any:
    """Sample-level / central DP: DP-SGD over the units, one example per unit.

    ``encode`` runs client side, on all examples at once, so its rows are checked for
    independence like a batched function's. The per-example gradients need no such check:
    opacus computes and clips them from the model and ``loss_fn`` per example (a
    ``loss_fn`` that mixes the examples of a batch is outside what recomputation can see).
    """
    from benchmark.federation.dp_sgd import run_dp_sgd

    noise_multiplier = plain_number("noise_multiplier", noise_multiplier)
    clip_norm = plain_number("clip_norm", clip_norm)
    batch_size = plain_number("batch_size", batch_size, integer=True)
    steps = plain_number("steps", steps, integer=True)
    lr = plain_number("lr", lr)
    pool._unit_level("pool.dp_sgd")
    if check_gaussian(clip_norm, noise_multiplier, pool._allow_nonprivate):
        raise PrivacyError("DP-SGD needs noise_multiplier > 0")
    if any(len(records) != 1 for records in pool._records):
        raise PrivacyError(
            "DP-SGD clips per example, so every privacy unit must hold one example "
            "(privacy.unit: sample or central); for user-level DP use pool.aggregate"
        )
    if batch_size < 1 or steps < 1:
        raise PrivacyError("DP-SGD needs batch_size >= 1 and steps >= 1")
    # opacus samples each example at 1 / (batches per epoch), known before training
    sample_rate = 1.0 / math.ceil(len(pool._records) / batch_size)
    release = Release(
        SUBSAMPLED_GAUSSIAN,
        noise_multiplier,
        clip_norm,
        sample_rate,
        steps,
        label,
        sampling="poisson",
        unit=pool._unit,
    )

    def compute() -> dict[str, Any]:
        with client_scope():
            examples = [c.records[0] for c in pool._executor.local_clients()]
            trained, used_rate = run_dp_sgd(
                model,
                examples,
                _checked_encode(pool, encode),
                loss_fn,
                noise_multiplier=noise_multiplier,
                clip_norm=clip_norm,
                batch_size=batch_size,
                steps=steps,
                lr=lr,
                seed=int(pool._rng(4).integers(2**31)),
            )
        if not math.isclose(used_rate, sample_rate, rel_tol=1e-12):
            raise PrivacyError(f"DP-SGD sampled at {used_rate}, admitted at {sample_rate}")
        pool._record(release)
        return {k: v.detach().cpu().clone() for k, v in trained.state_dict().items()}

    args = {"noise_multiplier": noise_multiplier, "clip_norm": clip_norm, "lr": lr}
    args |= {"batch_size": batch_size, "steps": steps, "label": label}
    weights = pool._delivered("dp_sgd", args, compute, release)
    model.load_state_dict(weights)
    return model


def _checked_encode(pool: ClientPool, encode: Callable[[list[dict[str, Any]]], Any]) -> Any:
    """``encode`` seeded, with its per-example rows checked before DP-SGD uses them."""
    seed = pool._call_seed(pool._release_index, ENCODE_STREAM)

    def checked(examples: list[dict[str, Any]]) -> Any:
        chosen = pool._choose(list(range(len(pool._records))))
        check = pool._recheck(ENCODE, (encode, None), chosen)
        start = time.perf_counter()
        with seeded_rngs(seed):
            tensors = encode(examples)
        rows = output_rows(ENCODE, tensors)
        for i in sorted(check.chosen):
            one = {name: array[i : i + 1] for name, array in rows.items()}
            check.submit(i, pool._records[i], seed, one)
        check.finish(time.perf_counter() - start)
        return tensors

    return checked
