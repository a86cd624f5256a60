"""The client pool: the privacy boundary between a method's server code and private data.

Server code hands the pool a client-side function and a broadcast payload. The pool
samples the clients (full participation or Poisson), runs the function on each sampled
client's own data, clips every client's vector to the declared L2 bound, sums, adds
Gaussian noise of the declared multiplier, records the release in the privacy ledger, and
returns only the noisy sum. It never returns texts, per-client values, or the sampled
count (which is private under Poisson sampling).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from benchmark.federation.clients import ClientBatch, ClientData, client_scope
from benchmark.federation.costs import CostCounters, count_payload
from benchmark.federation.tree import TreeAggregator
from benchmark.privacy.errors import PrivacyError
from benchmark.privacy.ledger import (
    NONPRIVATE,
    SUBSAMPLED_GAUSSIAN,
    TREE_AGGREGATION,
    PrivacyLedger,
    Release,
)

ClientFn = Callable[[ClientData, Any], np.ndarray]
BatchFn = Callable[[ClientBatch, Any], np.ndarray]


class ServerAccessError(PrivacyError, AttributeError):
    """Server code asked the pool for something it never exposes."""


@dataclass(frozen=True)
class Aggregate:
    """What the server receives: the noisy sum and the public normaliser ``q * N``."""

    noisy_sum: np.ndarray
    expected_count: float

    @property
    def mean(self) -> np.ndarray:
        return self.noisy_sum / max(self.expected_count, 1.0)


class ClientPool:
    """Private clients behind the privacy boundary (one privacy unit per client)."""

    def __init__(
        self,
        clients: dict[str, list[dict[str, Any]]],
        *,
        ledger: PrivacyLedger,
        seed: int,
        unit: str = "user",
        allow_nonprivate: bool = False,
    ) -> None:
        self._ids = sorted(clients)
        self._clients = [ClientData(list(clients[cid]), {}) for cid in self._ids]
        self._ledger = ledger
        self._seed = seed
        self._unit = unit
        self._allow_nonprivate = allow_nonprivate
        self._release_index = 0
        self._trees: dict[str, TreeAggregator] = {}
        self.costs = CostCounters()

    def __getattr__(self, name: str) -> Any:
        raise ServerAccessError(
            f"the client pool has no {name!r}: server-side code only receives clipped, "
            "noised aggregates (use pool.aggregate or pool.open_tree)"
        )

    @property
    def num_clients(self) -> int:
        return len(self._clients)

    @property
    def ledger(self) -> PrivacyLedger:
        return self._ledger

    def _rng(self, *stream: int) -> np.random.Generator:
        return np.random.default_rng([self._seed, self._release_index, *stream])

    def _check_mechanism(self, clip_norm: float, noise_multiplier: float) -> bool:
        """Validate the declared mechanism; True when it is a non-private release."""
        if noise_multiplier < 0 or math.isnan(noise_multiplier):
            raise PrivacyError(f"noise_multiplier must be >= 0, got {noise_multiplier}")
        if noise_multiplier == 0:
            if not self._allow_nonprivate:
                raise PrivacyError(
                    "a release without noise (noise_multiplier=0) is only allowed in a "
                    "non-private run (privacy.epsilon: inf)"
                )
            return True
        if not (math.isfinite(clip_norm) and clip_norm > 0):
            raise PrivacyError(f"a private release needs a finite clip_norm > 0, got {clip_norm}")
        return False

    def _sample(self, sample_rate: float) -> list[int]:
        if not 0 < sample_rate <= 1:
            raise PrivacyError(f"sample_rate must be in (0, 1], got {sample_rate}")
        if sample_rate == 1:
            return list(range(self.num_clients))
        keep = self._rng(0).random(self.num_clients) < sample_rate
        return [int(i) for i in np.flatnonzero(keep)]

    @staticmethod
    def _validated(rows: Any, count: int, dim: int) -> np.ndarray:
        """Client output as a (count, dim) finite float array, or a PrivacyError."""
        rows = np.asarray(rows)
        if rows.dtype.kind not in "fiu":
            raise PrivacyError(
                f"client-side functions must return numbers, got dtype {rows.dtype}: raw data "
                "never leaves a client"
            )
        if rows.dtype.kind != "f":
            rows = rows.astype(np.float64)
        if rows.ndim != 2 or rows.shape[0] != count:
            raise PrivacyError(
                f"client-side function must give one 1-D vector per client; got shape {rows.shape}"
            )
        if rows.shape[1] != dim:
            raise PrivacyError(f"client vectors have dim {rows.shape[1]}, declared {dim}")
        return rows

    @staticmethod
    def _row_sum(rows: np.ndarray, clip_norm: float) -> np.ndarray:
        """Sum of the rows, each scaled to L2 norm at most ``clip_norm``: one pass for the
        norms (which also catches non-finite values) and one matrix-vector product."""
        norms = np.linalg.norm(rows, axis=1)
        if not np.all(np.isfinite(norms)):
            raise PrivacyError("a client-side function returned a non-finite value")
        scale = np.ones_like(norms)
        if math.isfinite(clip_norm):
            scale = np.minimum(1.0, clip_norm / np.maximum(norms, 1e-12))
        return (scale.astype(rows.dtype) @ rows).astype(np.float64)

    def _clipped_sum(
        self,
        indices: list[int],
        fn: Any,
        payload: Any,
        clip_norm: float,
        dim: int,
        batched: bool,
        expected: float,
    ) -> np.ndarray:
        """Sum of the clipped client vectors. One client at a time unless ``batched``, so only
        one client's vector (e.g. a full model delta) is held at once. Costs are counted for
        the ``expected`` (public) number of participants."""
        floats_down, texts_down = count_payload(payload)
        start = time.perf_counter()
        total = np.zeros(dim)
        with client_scope():
            if batched and indices:
                batch = ClientBatch([self._clients[i] for i in indices])
                total += self._row_sum(
                    self._validated(fn(batch, payload), len(indices), dim), clip_norm
                )
            elif indices:
                for i in indices:
                    row = self._validated(np.asarray(fn(self._clients[i], payload))[None], 1, dim)
                    total += self._row_sum(row, clip_norm)
        self.costs.add(expected, floats_down, texts_down, dim, time.perf_counter() - start)
        return total

    def aggregate(
        self,
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
        nonprivate = self._check_mechanism(clip_norm, noise_multiplier)
        indices = self._sample(sample_rate)
        total = self._clipped_sum(
            indices, client_fn, payload, clip_norm, dim, batched, sample_rate * self.num_clients
        )
        if not nonprivate:
            total = total + self._rng(1).normal(0.0, noise_multiplier * clip_norm, size=dim)
        self._ledger.record(
            Release(
                mechanism=NONPRIVATE if nonprivate else SUBSAMPLED_GAUSSIAN,
                noise_multiplier=noise_multiplier,
                sensitivity=clip_norm,
                sample_rate=sample_rate,
                count=1,
                label=label,
                sampling="full" if sample_rate == 1 else "poisson",
                unit=self._unit,
                dim=dim,
            )
        )
        self._release_index += 1
        return Aggregate(total, sample_rate * self.num_clients)

    def centralized(self, train_fn: Callable[[list[ClientData]], Any], *, label: str) -> Any:
        """Run ``train_fn`` on every client's data at once (the ε = ∞ bound only).

        Records a non-private release, so the ledger's ε is infinite; refused in any
        private run.
        """
        if not self._allow_nonprivate:
            raise PrivacyError(
                "centralized access to client data is only allowed in a non-private run "
                "(privacy.epsilon: inf)"
            )
        with client_scope():
            result = train_fn(self._clients)
        self._ledger.record(Release(NONPRIVATE, 0.0, math.inf, 1.0, 1, label, unit=self._unit))
        self._release_index += 1
        return result

    def dp_sgd(
        self,
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

        See :func:`benchmark.federation.dp_sgd.run_dp_sgd`; ``encode`` runs client side.
        """
        from benchmark.federation.dp_sgd import run_dp_sgd

        if self._check_mechanism(clip_norm, noise_multiplier):
            raise PrivacyError("DP-SGD needs noise_multiplier > 0")
        if any(len(c._records) != 1 for c in self._clients):
            raise PrivacyError(
                "DP-SGD clips per example, so every privacy unit must hold one example "
                "(privacy.unit: sample or central); for user-level DP use pool.aggregate"
            )
        with client_scope():
            examples = [c.records[0] for c in self._clients]
            model, sample_rate = run_dp_sgd(
                model,
                examples,
                encode,
                loss_fn,
                noise_multiplier=noise_multiplier,
                clip_norm=clip_norm,
                batch_size=batch_size,
                steps=steps,
                lr=lr,
                seed=int(self._rng(4).integers(2**31)),
            )
        self._ledger.record(
            Release(
                SUBSAMPLED_GAUSSIAN,
                noise_multiplier,
                clip_norm,
                sample_rate,
                steps,
                label,
                sampling="poisson",
                unit=self._unit,
            )
        )
        self._release_index += 1
        return model

    def open_tree(
        self,
        name: str,
        *,
        dim: int,
        clip_norm: float,
        noise_multiplier: float,
        cohort_size: int,
        max_leaves: int | None = None,
    ) -> int:
        """Start a single-epoch tree (DP-FTRL): clients are shuffled once and split into
        disjoint cohorts of ``cohort_size``, so each client contributes to one leaf only.
        The whole tree (``max_leaves`` caps it) is recorded in the ledger now; returns
        its number of leaves."""
        if self._check_mechanism(clip_norm, noise_multiplier):
            raise PrivacyError("tree aggregation is a private mechanism; use aggregate() instead")
        if not 1 <= cohort_size <= self.num_clients:
            raise PrivacyError(f"cohort_size must be in [1, {self.num_clients}], got {cohort_size}")
        order = self._rng(2).permutation(self.num_clients)
        leaves = self.num_clients // cohort_size
        if max_leaves is not None:  # a shorter tree (fewer rounds) has fewer levels
            leaves = max(1, min(leaves, max_leaves))
        cohorts = [order[i * cohort_size : (i + 1) * cohort_size].tolist() for i in range(leaves)]
        self._trees[name] = TreeAggregator(
            dim=dim,
            clip_norm=clip_norm,
            noise_multiplier=noise_multiplier,
            cohorts=cohorts,
            seed=[self._seed, self._release_index, 3],
        )
        self._ledger.record(
            Release(
                mechanism=TREE_AGGREGATION,
                noise_multiplier=noise_multiplier,
                sensitivity=clip_norm,
                sample_rate=1.0,
                count=leaves,
                label=name,
                unit=self._unit,
                dim=dim,
            )
        )
        self._release_index += 1
        return leaves

    def tree_step(
        self, name: str, client_fn: ClientFn | BatchFn, payload: Any = None, batched: bool = False
    ) -> np.ndarray:
        """Add the next cohort's clipped sum as a leaf; return the noisy prefix sum so far."""
        if name not in self._trees:
            raise PrivacyError(f"no open tree named {name!r}")
        tree = self._trees[name]
        cohort = tree.next_cohort()
        leaf = self._clipped_sum(
            cohort, client_fn, payload, tree.clip_norm, tree.dim, batched, len(cohort)
        )
        return tree.add_leaf(leaf)

    def state_dict(self) -> dict[str, Any]:
        """Harness-private state for resuming (kept in the run directory, never published)."""
        return {
            "release_index": self._release_index,
            "memos": [c._memo for c in self._clients],
            "trees": {k: t.state_dict() for k, t in self._trees.items()},
            "costs": self.costs,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._release_index = state["release_index"]
        for client, memo in zip(self._clients, state["memos"], strict=True):
            client._memo.clear()
            client._memo.update(memo)
        self._trees = {k: TreeAggregator.from_state(v) for k, v in state["trees"].items()}
        self.costs = state["costs"]
