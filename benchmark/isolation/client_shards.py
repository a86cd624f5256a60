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

import itertools
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from benchmark.checkpoints import pack_memos, unpack_memos
from benchmark.isolation.client_process import (
    MALFORMED,
    NO_LOCAL_CLIENTS,
    ClientFunctionError,
    ClientProcess,
    MemoHolding,
)
from benchmark.isolation.sandbox import Policy
from benchmark.privacy.errors import PrivacyError

END = ()  # what a host streams after a call's rows


class _ShardHost:
    """One actor: a client worker of its range of clients (indices local to the range)."""

    def __init__(
        self, clients: list[Any], policy: Policy, threads: int, tmp: str, log: str | None
    ) -> None:
        self.worker = ClientProcess(clients, policy, threads, Path(tmp), _path(log), fresh=True)

    def rows(
        self, job: bytes, indices: list[int], seeds: list[int], batched: bool
    ) -> Iterator[Any]:
        """Streamed: the rows (a batched call's in the worker's blocks) as the worker
        computes them, then :data:`END`."""
        yield from self.worker.rows(job, indices, seeds, batched)  # a generator: Ray sends
        yield END

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


class ShardedClients(MemoHolding):
    """The pool's client executor over ``actors`` Ray actors (see the module docstring)."""

    def __init__(
        self,
        clients: list[Any],
        policy: Policy,
        threads: int,
        tmp: Path,
        actors: int,
        log: Path | None = None,
    ) -> None:
        import ray

        join_ray()
        self._clients, self._policy, self._threads, self._tmp = clients, policy, threads, tmp
        self._log = log
        self._starts = [
            int(r[0]) for r in np.array_split(np.arange(len(clients)), actors) if len(r)
        ]
        ends = [*self._starts[1:], len(clients)]
        # a GPU run's hosts share the GPU (Ray hides it from an actor that asks for none,
        # and the sandboxed worker inherits that CUDA_VISIBLE_DEVICES)
        gpus = 1 / len(self._starts) if policy.gpu else 0
        host = ray.remote(num_cpus=1, num_gpus=gpus, max_restarts=0)(_ShardHost)
        self._hosts = [
            host.remote(clients[a:b], policy, threads, str(tmp), _text(log))
            for a, b in zip(self._starts, ends, strict=True)
        ]
        self.payload_counts = (0, 0)  # declared by the method side for each call (coordinator)

    def _host_of(self, index: int) -> int:
        return int(np.searchsorted(self._starts, index, side="right")) - 1

    def rows(
        self, job: bytes, indices: list[int], seeds: list[int], batched: bool
    ) -> Iterator[np.ndarray]:
        """The actors compute their clients' rows in parallel and stream them back; they
        are handed on in the order of ``indices``, one row at a time (a batched call: in
        blocks of the workers' size, :func:`merge_blocks`), so the coordinator holds a few
        blocks, never a whole call (Ray may buffer blocks not yet read in its object
        store)."""
        self._client_code_runs()
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
            fetched = {h: (_get(ref) for ref in stream) for h, stream in streams.items()}
            yield from merge_blocks(fetched, parts, len(indices))
        else:
            for index in indices:
                yield _next(streams[self._host_of(index)])
        if not all(_is_end(_next(stream)) for stream in streams.values()):
            raise PrivacyError("the client side sent more rows than clients")

    def run_all(self, job: bytes) -> bytes:
        """The ε = ∞ bound's centralised job, in a local worker holding every client."""
        worker = ClientProcess(self._clients, self._policy, self._threads, self._tmp, self._log)
        try:
            return worker.run_all(job)
        finally:
            worker.close()

    def local_clients(self) -> list[Any]:
        raise PrivacyError(NO_LOCAL_CLIENTS)

    def _fetch_memos(self) -> Any:
        """Every actor's memos in the single-worker format (a checkpoint stores it)."""
        import torch

        blobs = _get([h.memos.remote() for h in self._hosts])
        try:
            memos = [memo for blob in blobs for memo in unpack_memos(blob)]
        except Exception:  # the loader's message quotes what client code put there
            raise ClientFunctionError(MALFORMED) from None
        return torch.frombuffer(bytearray(pack_memos(memos)), dtype=torch.uint8)

    def load_memos(self, state: Any) -> None:
        memos = unpack_memos(state.numpy().tobytes())
        ends = [*self._starts[1:], len(memos)]
        with self.outside_calls():
            _get(
                [
                    h.load_memos.remote(pack_memos(memos[a:b]))
                    for h, a, b in zip(self._hosts, self._starts, ends, strict=True)
                ]
            )
        self._held = state

    def close(self) -> None:
        import ray

        ray.get([h.close.remote() for h in self._hosts])
        for host in self._hosts:
            ray.kill(host)


def merge_blocks(
    blocks: Mapping[int, Iterator[Any]], parts: Mapping[int, list[int]], count: int
) -> Iterator[np.ndarray]:
    """A batched call's ``count`` rows in the order asked for, as consecutive blocks: host
    ``h`` streams the rows of its positions ``parts[h]`` (ascending) in blocks, and each
    output block gathers the next positions' rows until it holds at least as many as the
    largest block a host sent (so under twice that; a host's contiguous positions pass
    through without a copy). Only each host's current block and the pieces being gathered
    are held, never the whole call; a host that sends a malformed or non-numeric block, or
    more or fewer rows than its positions, is refused. Nothing is read from a host's
    stream past its rows (:data:`END` comes next)."""
    owner = np.empty(count, dtype=np.intp)
    for h, positions in parts.items():
        owner[positions] = h
    cuts = [0, *(np.flatnonzero(np.diff(owner)) + 1).tolist(), count] if count else [0]
    readers = {h: _BlockReader(blocks[h], len(positions)) for h, positions in parts.items()}
    pieces: list[np.ndarray] = []
    held = target = 0
    for start, end in itertools.pairwise(cuts):
        reader = readers[int(owner[start])]
        while start < end:
            piece = reader.take(end - start)
            target = max(target, reader.block_rows)
            pieces.append(piece)
            held += len(piece)
            start += len(piece)
            if held >= target:
                yield _joined(pieces)
                pieces, held = [], 0
    if pieces:
        yield _joined(pieces)


def _joined(pieces: list[np.ndarray]) -> np.ndarray:
    if len({p.shape[1] for p in pieces}) > 1:
        raise PrivacyError("client-side function must give one 1-D vector per client")
    return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)


class _BlockReader:
    """One host's streamed blocks, read a given number of rows at a time."""

    def __init__(self, blocks: Iterator[Any], owed: int) -> None:
        self.blocks, self.owed = blocks, owed
        self.block = np.zeros((0, 0))
        self.at = self.block_rows = 0

    def take(self, n: int) -> np.ndarray:
        """Up to ``n`` of the next rows (fewer at the end of the current block)."""
        if self.at == len(self.block):
            block = next(self.blocks, None)
            if not isinstance(block, np.ndarray):  # END, or nothing
                raise PrivacyError("the client side sent fewer rows than clients")
            if block.ndim != 2 or not len(block) or block.dtype.kind not in "fiu":
                raise PrivacyError("client-side function must give one 1-D vector per client")
            if len(block) > self.owed:
                raise PrivacyError("the client side sent more rows than clients")
            self.block, self.at, self.block_rows = block, 0, len(block)
        piece = self.block[self.at : self.at + n]
        self.at += len(piece)
        self.owed -= len(piece)
        return piece


def _is_end(item: Any) -> bool:
    return isinstance(item, tuple) and item == END


def _text(path: Path | None) -> str | None:
    return None if path is None else str(path)


def _path(text: str | None) -> Path | None:
    return None if text is None else Path(text)


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
