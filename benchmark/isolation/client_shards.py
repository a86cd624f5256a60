"""The client side spread over Ray actors: the train shards split into contiguous ranges,
each range held by an actor that runs a sandboxed client worker on its node.

One :class:`~benchmark.isolation.client_process.ClientProcess` holds every client of a
run on the coordinator's machine. With ``client_actors`` > 0 the coordinator instead
starts that many Ray actors (the ``cluster`` extra); each starts a ``ClientProcess`` of its
own range, under the same sandbox policy, on whichever node Ray places it, so the clients'
data and their client-side work scale past one machine. Nothing else changes: the pool
asks this object for rows exactly as it asks a ``ClientProcess`` (a call's rows come back
in the order of the clients asked for, whichever actor computed them), checks, clips,
sums and noises them, and recomputes its sample of clients alone as before. Per-client
calls are seeded per client, so their rows do not depend on the sharding; a batched call
runs as one batch per actor (a batched function must compute each row from its own client
alone, which the pool's independence check enforces either way).

The actors must see the paths the sandbox policy names (the harness code, the run's
``client_tmp``): one host or a shared file system, as for the Ray executor. The
centralised job of the ε = ∞ bound (:meth:`run_all`) needs every client in one place: it
runs in a local client worker started for it. Memos are gathered into and split from the
single-worker format, so a checkpoint resumes under any number of actors.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from benchmark.isolation.client_process import (
    NO_LOCAL_CLIENTS,
    ClientFunctionError,
    ClientProcess,
    pack_memos,
    unpack_memos,
)
from benchmark.isolation.sandbox import Policy
from benchmark.privacy.errors import PrivacyError


class _ShardHost:
    """One actor: a client worker of its range of clients (indices local to the range)."""

    def __init__(self, clients: list[Any], policy: Policy, threads: int, tmp: str) -> None:
        self.worker = ClientProcess(clients, policy, threads, Path(tmp))

    def rows(
        self, job: bytes, indices: list[int], seeds: list[int], batched: bool
    ) -> Iterator[Any]:
        """Streamed: the rows as the worker computes them (a batched call's blocks joined
        into the one block per actor that :meth:`ShardedClients._batched` places), then its
        payload counts."""
        rows = self.worker.rows(job, indices, seeds, batched)
        if not batched:
            yield from rows
        elif blocks := list(rows):
            yield np.concatenate(blocks)
        yield self.worker.payload_counts

    def memos(self) -> bytes:
        return self.worker.memos().numpy().tobytes()

    def load_memos(self, blob: bytes) -> None:
        import torch

        self.worker.load_memos(torch.frombuffer(bytearray(blob), dtype=torch.uint8))

    def close(self) -> None:
        self.worker.close()


def join_ray(address: str | None = None) -> None:
    """Join the Ray cluster at ``address`` unless this process already joined one (None:
    a new local head on this machine's cores). The one place the harness starts Ray, for
    the suite's executor and the client shards alike."""
    import ray

    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False)


class ShardedClients:
    """The pool's client executor over ``actors`` Ray actors (see the module docstring)."""

    def __init__(
        self, clients: list[Any], policy: Policy, threads: int, tmp: Path, actors: int
    ) -> None:
        import ray

        join_ray()
        self._clients, self._policy, self._threads, self._tmp = clients, policy, threads, tmp
        self._starts = [
            int(r[0]) for r in np.array_split(np.arange(len(clients)), actors) if len(r)
        ]
        ends = [*self._starts[1:], len(clients)]
        host = ray.remote(num_cpus=1, max_restarts=0)(_ShardHost)
        self._hosts = [
            host.remote(clients[a:b], policy, threads, str(tmp))
            for a, b in zip(self._starts, ends, strict=True)
        ]
        self.payload_counts = (0, 0)

    def _host_of(self, index: int) -> int:
        return int(np.searchsorted(self._starts, index, side="right")) - 1

    def rows(
        self, job: bytes, indices: list[int], seeds: list[int], batched: bool
    ) -> Iterator[np.ndarray]:
        """The actors compute their clients' rows in parallel and stream them back; they
        are handed on in the order of ``indices``, one row at a time (a batched call: one
        block), so the coordinator holds one client's row at once, as with one worker."""
        parts: dict[int, list[int]] = {}
        for position, index in enumerate(indices):
            parts.setdefault(self._host_of(index), []).append(position)
        streams = {
            h: iter(
                self._hosts[h]
                .rows.options(num_returns="streaming")
                .remote(
                    job,
                    [indices[p] - self._starts[h] for p in positions],
                    seeds if batched else [seeds[p] for p in positions],
                    batched,
                )
            )
            for h, positions in parts.items()
        }
        if batched:
            yield from self._batched(streams, parts, len(indices))
        else:
            for index in indices:
                yield _next(streams[self._host_of(index)])
        counts = [_next(stream) for stream in streams.values()]
        if not all(isinstance(c, tuple) for c in counts):
            raise PrivacyError("the client side sent more rows than clients")
        self.payload_counts = tuple(max((c[k] for c in counts), default=0) for k in (0, 1))

    @staticmethod
    def _batched(
        streams: dict[int, Iterator[Any]], parts: dict[int, list[int]], count: int
    ) -> Iterator[np.ndarray]:
        """Each actor's block (one batch per actor), placed in the order asked for."""
        blocks = {h: np.asarray(_next(stream)) for h, stream in streams.items()}
        if not blocks:
            return
        first = next(iter(blocks.values()))
        for h, block in blocks.items():
            if block.ndim != 2 or block.shape[1:] != first.shape[1:]:
                raise PrivacyError("client-side function must give one 1-D vector per client")
            if len(block) != len(parts[h]):
                raise PrivacyError(f"the client side sent {len(block)} rows for {len(parts[h])}")
        out = np.empty((count, first.shape[1]), np.result_type(*blocks.values()))
        for h, block in blocks.items():
            out[parts[h]] = block
        yield out

    def run_all(self, job: bytes) -> bytes:
        """The ε = ∞ bound's centralised job, in a local worker holding every client."""
        worker = ClientProcess(self._clients, self._policy, self._threads, self._tmp)
        try:
            return worker.run_all(job)
        finally:
            worker.close()

    def local_clients(self) -> list[Any]:
        raise PrivacyError(NO_LOCAL_CLIENTS)

    def memos(self) -> Any:
        """Every actor's memos in the single-worker format (a checkpoint stores it)."""
        import torch

        blobs = _get([h.memos.remote() for h in self._hosts])
        memos = [memo for blob in blobs for memo in unpack_memos(blob)]
        return torch.frombuffer(bytearray(pack_memos(memos)), dtype=torch.uint8)

    def load_memos(self, state: Any) -> None:
        memos = unpack_memos(state.numpy().tobytes())
        ends = [*self._starts[1:], len(memos)]
        _get(
            [
                h.load_memos.remote(pack_memos(memos[a:b]))
                for h, a, b in zip(self._hosts, self._starts, ends, strict=True)
            ]
        )

    def close(self) -> None:
        import ray

        ray.get([h.close.remote() for h in self._hosts])
        for host in self._hosts:
            ray.kill(host)


def _next(stream: Iterator[Any]) -> Any:
    """The next item an actor streamed (None when it sent no more)."""
    ref = next(stream, None)
    return None if ref is None else _get(ref)


def _get(refs: Any) -> Any:
    """``ray.get``; an actor's failure becomes the pool's error (a client function that
    raised is reported by its type name only, as the local client worker reports it)."""
    import ray

    try:
        return ray.get(refs)
    except ray.exceptions.RayError as exc:
        cause = getattr(exc, "cause", None)
        if isinstance(cause, PrivacyError):
            raise type(cause)(str(cause)) from None
        raise ClientFunctionError(f"a client shard failed ({type(exc).__name__})") from None
