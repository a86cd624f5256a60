"""The pool's operations, declared once.

Each :class:`Operation` names a public operation of
:class:`~benchmark.federation.pool.ClientPool`, the mechanism module that implements it
(:mod:`benchmark.federation.mechanisms`), its leading parameters, what travels as an opaque
blob and how its answer is carried. From this table are derived: the pool's methods (bound
from the mechanism modules), the method process's
:class:`~benchmark.untrusted.method_process.PoolProxy` and the coordinator's dispatcher
(:func:`benchmark.isolation.coordinator.dispatch`). Adding an operation is one row here and
its mechanism module (``tests/test_operations.py`` checks that every side covers exactly
this table).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from benchmark.privacy.errors import PrivacyError


@dataclass(frozen=True)
class Aggregate:
    """What the server receives: the noisy sum and the public normaliser ``q * N``."""

    noisy_sum: np.ndarray
    expected_count: float

    @property
    def mean(self) -> np.ndarray:
        return self.noisy_sum / max(self.expected_count, 1.0)


class ServerAccessError(PrivacyError, AttributeError):
    """Server code asked the pool for something it never exposes."""


# What travels as the call's blob (the rest of its arguments travel as JSON).
JOB = "job"  # client_fn and payload: a snapshot the client worker runs, never opened here
FUNCTION = "function"  # train_fn: cloudpickled, run by the client worker on every client
WEIGHTS = "weights"  # a state dict, as a blob that loads as tensors only
BLOB_PARAMETERS = {JOB: ("client_fn", "payload"), FUNCTION: ("train_fn",), WEIGHTS: ("weights",)}

# How the answer travels.
NOTHING = "nothing"
AGGREGATE = "aggregate"  # an Aggregate: the noised sum (.npy) and expected_count (header)
ARRAY = "array"  # one array (.npy, read without pickle)
PLAIN = "plain"  # JSON data in the header (a tree's size, client positions)
PICKLED = "pickled"  # the ε = ∞ bound's centralised result, for the method side to open
TENSORS = "tensors"  # a state dict, as a blob that loads as tensors only


@dataclass(frozen=True)
class Operation:
    """One pool operation: ``name`` (the pool's method), the ``mechanism`` module that
    implements it, its leading ``parameters`` in order (those a caller may pass by
    position), what it ``sends`` as a blob (``""``: nothing), its ``answer``; whether the
    coordinator holds every unit's row (``holds_rows``: units x dim floats) or a dim x dim
    matrix (``holds_square``); ``in_process_only``, when set, is why the isolated path
    refuses it."""

    name: str
    mechanism: str
    parameters: tuple[str, ...]
    sends: str = ""
    answer: str = NOTHING
    holds_rows: bool = False
    holds_square: bool = False
    in_process_only: str = ""


JOB_PARAMETERS = ("client_fn", "payload")

OPERATIONS = (
    Operation("aggregate", "gaussian_sum", JOB_PARAMETERS, JOB, AGGREGATE),
    Operation("open_tree", "tree_aggregation", ("name",), answer=PLAIN),
    Operation("tree_step", "tree_aggregation", ("name", *JOB_PARAMETERS, "batched"), JOB, ARRAY),
    Operation("centralized", "centralized", ("train_fn",), FUNCTION, PICKLED),
    Operation("laplace_aggregate", "laplace_sum", JOB_PARAMETERS, JOB, ARRAY, holds_rows=True),
    Operation("dp_pca", "dp_pca", JOB_PARAMETERS, JOB, ARRAY, holds_rows=True, holds_square=True),
    Operation("define_partition", "partition", ("name", *JOB_PARAMETERS), JOB, holds_rows=True),
    Operation("part_sizes", "partition", ("partition",), answer=ARRAY),
    Operation("dp_logistic_sgd", "logistic_sgd", JOB_PARAMETERS, JOB, ARRAY, holds_rows=True),
    Operation("strong_clients", "client_groups", (), answer=PLAIN),
    Operation("define_group", "client_groups", ("name", "clients")),
    Operation("local_gaussian", "local_gaussian", JOB_PARAMETERS, JOB, AGGREGATE),
    Operation("local_dp_finetune", "local_dp_finetune", ("weights",), WEIGHTS, TENSORS),
    Operation("dp_preference_finetune", "preference_finetune", ("weights",), WEIGHTS, TENSORS),
    Operation(
        "dp_sgd",
        "harness_dp_sgd",
        ("model", "encode", "loss_fn"),
        in_process_only=(
            "its per-example clipping and noise would run beside the method's code; use "
            "pool.aggregate with one example per privacy unit"
        ),
    ),
)

BY_NAME = {operation.name: operation for operation in OPERATIONS}
