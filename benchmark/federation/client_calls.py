"""Where a release's client-side code runs, and what one release asks of it.

A client-side job is the function and its payload, live (run in the pool's process) or as
the snapshot an isolated method process sent (:func:`~benchmark.protocol.jobs.snapshot`:
run by a client worker, never unpickled in the pool's process). A :class:`ClientExecutor`
runs it on the clients the pool names and yields their rows; the pool checks, clips, sums
and noises them (:class:`~benchmark.federation.pool.ClientPool`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from benchmark.federation.clients import ClientBatch, ClientData, client_scope, seeded_rngs
from benchmark.federation.costs import count_payload
from benchmark.privacy.errors import PrivacyError

ClientFn = Callable[[ClientData, Any], np.ndarray]
BatchFn = Callable[[ClientBatch, Any], np.ndarray]
Job = tuple[Any, Any] | bytes


def job_of(client_fn: Any, payload: Any) -> Job:
    """The job of one release: an isolated method's pickled blob (its payload travels
    inside it), or the live function and payload."""
    return client_fn if isinstance(client_fn, bytes) else (client_fn, payload)


@dataclass(frozen=True)
class ClientCall:
    """The client calls of one release: the ``job``, the units it runs on (``indices``),
    the width of their rows, whether it is one ``batched`` call over all of them, the
    public participant count the costs record (``expected``), and the ``key`` the calls'
    seeds are derived from."""

    job: Job
    indices: list[int]
    dim: int
    batched: bool
    expected: float
    key: tuple[int, ...]


class ClientExecutor(Protocol):
    """Where client-side code runs: this process (:class:`InProcessClients`) or a client
    worker (:class:`benchmark.isolation.client_process.ClientProcess`). ``rows`` yields one
    (1, dim) array per client, or a batched call's (n, dim) rows as one array or as
    consecutive blocks of them, and then sets ``payload_counts`` (floats and texts a client
    downloads)."""

    payload_counts: tuple[int, int]

    def rows(
        self, job: Any, indices: list[int], seeds: list[int], batched: bool
    ) -> Iterable[np.ndarray]: ...

    def run_all(self, train_fn: Any) -> Any: ...

    def local_clients(self) -> list[ClientData]: ...

    def memos(self) -> Any: ...

    def load_memos(self, state: Any) -> None: ...


class NoClients:
    """The executor of a sealed pool (a run that post-processes another run's rounds,
    :mod:`benchmark.shared_rounds`): no client code runs, and the memos it was handed stay
    unopened."""

    payload_counts = (0, 0)

    def _refuse(self, *args: Any) -> Any:
        raise PrivacyError("no client code runs for a run that post-processes another's rounds")

    rows = run_all = local_clients = memos = _refuse

    def load_memos(self, state: Any) -> None:
        pass


class InProcessClients:
    """Client-side functions run in the pool's own process (unit tests, in-process runs)."""

    def __init__(self, records: list[list[dict[str, Any]]]) -> None:
        self._clients = [ClientData(r, {}) for r in records]
        self.payload_counts = (0, 0)

    def rows(
        self, job: Any, indices: list[int], seeds: list[int], batched: bool
    ) -> Iterator[np.ndarray]:
        fn, payload = job
        self.payload_counts = count_payload(payload)
        if batched:
            if indices:
                with client_scope(), seeded_rngs(seeds[0]):
                    rows = fn(ClientBatch([self._clients[i] for i in indices]), payload)
                yield rows
            return
        for i, seed in zip(indices, seeds, strict=True):
            with client_scope(), seeded_rngs(seed):
                row = np.asarray(fn(self._clients[i], payload))
            yield row[None]

    def run_all(self, train_fn: Any) -> Any:
        with client_scope():
            return train_fn(self._clients)

    def local_clients(self) -> list[ClientData]:
        return self._clients

    def memos(self) -> list[dict[str, Any]]:
        return [c._memo for c in self._clients]

    def load_memos(self, state: list[dict[str, Any]]) -> None:
        for client, memo in zip(self._clients, state, strict=True):
            client._memo.clear()
            client._memo.update(memo)
