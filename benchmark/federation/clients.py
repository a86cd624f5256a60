"""Client-side views of private data, readable only while the pool runs client code.

The pool sets a context flag around each client-side call. A :class:`ClientData` or
:class:`ClientBatch` leaked to the server (kept in a variable, returned, stored on the
method) raises :class:`PrivacyError` when read outside that scope.

Each client-side call also runs under :func:`seeded_rngs`, so its randomness is a function
of the call's seed alone: that is what lets the pool recompute a client's row in another
process and compare (:mod:`benchmark.federation.independence_check`).
"""

from __future__ import annotations

import random
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar
from types import ModuleType
from typing import Any

import numpy as np

from benchmark.data import LABEL, TEXT
from benchmark.privacy.errors import PrivacyError

_IN_CLIENT_SCOPE: ContextVar[bool] = ContextVar("fedsynth_in_client_scope", default=False)


@contextmanager
def client_scope() -> Iterator[None]:
    """Mark the code inside as running on the clients' side."""
    token = _IN_CLIENT_SCOPE.set(True)
    try:
        yield
    finally:
        _IN_CLIENT_SCOPE.reset(token)


@contextmanager
def seeded_rngs(seed: int) -> Iterator[None]:
    """Seed Python's, numpy's and (when imported) torch's global RNGs for one client-side
    call, then give the caller its own states back.

    Seeding makes a call's randomness depend on its seed only (the pool derives it from its
    secret seed, the release and the client), so the same call run alone elsewhere draws the
    same numbers; restoring keeps the server's randomness independent of the client calls.
    Randomness from anywhere else (an unseeded ``np.random.default_rng()``, ``os.urandom``)
    differs when recomputed and fails the check; Python's string hashing does too, unless
    the worker and the recomputation were forked from the same launch template
    (:mod:`benchmark.isolation.template`), which share its hash secret.
    """
    py_state, np_state = random.getstate(), np.random.get_state()
    torch = sys.modules.get("torch")
    with _torch_seeded(torch, seed) if torch is not None else nullcontext():
        random.seed(seed)
        np.random.seed(seed % 2**32)
        try:
            yield
        finally:
            random.setstate(py_state)
            np.random.set_state(np_state)


@contextmanager
def _torch_seeded(torch: ModuleType, seed: int) -> Iterator[None]:
    """torch's CPU generator (and CUDA's, where this process can use CUDA) seeded inside,
    restored after.

    Where CUDA is available it is initialised before the call, so that every call (the
    client worker's first and later ones, and its recomputation alone in a fresh process)
    starts from CUDA seeded the same way: whether an earlier call, or the server's code in
    this process, had initialised it is then no part of the row. Seeding CUDA without
    initialising it would queue a lazy seed that outlives the call. A process without the
    GPU (a CPU run's sandbox hides it) seeds only the CPU generator, as does its
    recomputation, sandboxed the same way."""
    if not torch.cuda.is_initialized() and torch.cuda.is_available():
        torch.cuda.init()
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []
    with torch.random.fork_rng(devices=devices):
        torch.random.default_generator.manual_seed(seed)
        if devices:
            torch.cuda.manual_seed_all(seed)
        yield


def _require_client_scope(what: str) -> None:
    if not _IN_CLIENT_SCOPE.get():
        raise PrivacyError(
            f"server-side code tried to read {what}: private client data is only readable "
            "inside a client-side function run by the client pool"
        )


class ClientData:
    """One client's private records and its client-side memo (persists across rounds)."""

    __slots__ = ("_memo", "_records")

    def __init__(self, records: list[dict[str, Any]], memo: dict[str, Any]) -> None:
        self._records = records
        self._memo = memo

    @property
    def records(self) -> list[dict[str, Any]]:
        _require_client_scope("client records")
        return self._records

    @property
    def texts(self) -> list[str]:
        _require_client_scope("client texts")
        return [r[TEXT] for r in self._records]

    @property
    def labels(self) -> list[Any]:
        _require_client_scope("client labels")
        return [r.get(LABEL) for r in self._records]

    def memo(self, key: str, compute: Callable[[ClientData], Any]) -> Any:
        """Client-side cache, e.g. embeddings of the client's own texts."""
        _require_client_scope("client memo")
        if key not in self._memo:
            self._memo[key] = compute(self)
        return self._memo[key]

    def __reduce__(self) -> Any:
        raise PrivacyError("client data cannot be serialised out of the client pool")

    def __repr__(self) -> str:
        return "<ClientData (private)>"


class ClientBatch:
    """Several clients processed by one vectorised client-side function.

    The function must compute each row from that row's client only (as if run on each
    device), and its randomness must not depend on who else is in the batch: the pool seeds
    the RNGs once per batch call, and recomputes sampled rows in a batch of one with the
    same seed (:mod:`benchmark.federation.independence_check`). It clips and noises every row
    separately before summing.
    """

    __slots__ = ("_clients",)

    def __init__(self, clients: list[ClientData]) -> None:
        self._clients = clients

    def __len__(self) -> int:
        return len(self._clients)

    @property
    def clients(self) -> list[ClientData]:
        _require_client_scope("a client batch")
        return self._clients

    def memo_rows(self, key: str, compute: Callable[[list[ClientData]], np.ndarray]) -> np.ndarray:
        """Per-client cached rows; ``compute`` gets only the clients missing from the cache."""
        _require_client_scope("client memo")
        missing = [c for c in self._clients if key not in c._memo]
        if missing:
            rows = np.asarray(compute(missing))
            if len(rows) != len(missing):
                raise ValueError(
                    f"memo {key!r}: compute returned {len(rows)} rows for {len(missing)}"
                )
            for client, row in zip(missing, rows, strict=True):
                client._memo[key] = row
        return np.stack([c._memo[key] for c in self._clients])

    def __reduce__(self) -> Any:
        raise PrivacyError("client data cannot be serialised out of the client pool")
