"""The client worker: the untrusted process that holds the train shards and runs
client-side code (its trusted handle is
:class:`benchmark.isolation.client_process.ClientProcess`, whose docstring gives the
protocol and what leaves this process).

It starts through the launch (:mod:`benchmark.isolation.launch`, forked from the launch
template or from a fresh interpreter), which sandboxes itself first, then receives the
shards and serves: it runs each job blob on its clients as the pool would in process
(inside :func:`client_scope`, under :func:`seeded_rngs` with the seeds the coordinator
sends) and answers with rows, never anything else it computed.
"""

from __future__ import annotations

import json
import mmap
import os
import pickle
import socket
import traceback
from typing import Any

import numpy as np

from benchmark.checkpoints import pack_memos, unpack_memos
from benchmark.federation.clients import ClientBatch, ClientData, client_scope, seeded_rngs
from benchmark.protocol import wire
from benchmark.protocol.jobs import load_job

SHARED_ROWS_BYTES = 1 << 20  # batched rows larger than this go through shared memory


def _send_batch(rows: Any, stream: Any, shared_fd: int) -> None:
    """A batched call's rows: through the shared memory file when large (one copy, no
    pickling or framing of hundreds of MB), else as a ``.npy`` blob."""
    rows = np.ascontiguousarray(rows)
    if rows.dtype.kind not in "fiu" or rows.ndim != 2 or rows.nbytes <= SHARED_ROWS_BYTES:
        wire.send(stream, {}, wire.array_bytes(rows))
        return
    os.ftruncate(shared_fd, rows.nbytes)
    with mmap.mmap(shared_fd, rows.nbytes) as view:
        target = np.frombuffer(view, rows.dtype, rows.size).reshape(rows.shape)
        target[...] = rows
        del target
    wire.send(stream, {"shared": True, "dtype": rows.dtype.str, "shape": list(rows.shape)})


def _rows(
    clients: list[ClientData], header: dict[str, Any], job: bytes, stream: Any, shared_fd: int
) -> None:
    fn, payload = load_job(bytearray(job))
    indices, seeds = header["indices"], header["seeds"]
    with client_scope():
        if header["batched"]:
            if indices:
                with seeded_rngs(seeds[0]):
                    rows = fn(ClientBatch([clients[i] for i in indices]), payload)
                _send_batch(rows, stream, shared_fd)
        else:
            for i, seed in zip(indices, seeds, strict=True):
                with seeded_rngs(seed):
                    row = np.asarray(fn(clients[i], payload))
                wire.send(stream, {}, wire.array_bytes(row[None]))
    wire.send(stream, {"done": True})


def _memos(clients: list[ClientData]) -> bytes:
    return pack_memos([c._memo for c in clients])


def _load_memos(clients: list[ClientData], blob: bytes) -> None:
    for client, memo in zip(clients, unpack_memos(blob), strict=True):
        client._memo.clear()
        client._memo.update(memo)


def _serve(
    clients: list[ClientData],
    header: dict[str, Any],
    blobs: list[bytes],
    stream: Any,
    shared_fd: int,
) -> None:
    op = header["op"]
    if op == "rows":
        _rows(clients, header, blobs[0], stream, shared_fd)
    elif op == "all":
        import cloudpickle

        train_fn = pickle.loads(blobs[0])
        with client_scope():
            result = train_fn(clients)
        wire.send(stream, {"done": True}, cloudpickle.dumps(result))
    elif op == "memos":
        wire.send(stream, {"done": True}, _memos(clients))
    elif op == "load_memos":
        _load_memos(clients, blobs[0])
        wire.send(stream, {"done": True})
    else:
        raise ValueError(op)


def main(fd: int, shared_fd: int) -> None:
    sock = socket.socket(fileno=fd)
    stream = sock.makefile("rwb")
    header, blobs = wire.recv(stream)
    clients = [ClientData(records, {}) for records in json.loads(blobs[0])]
    del blobs
    if header["threads"]:
        import torch

        torch.set_num_threads(header["threads"])
    while True:
        try:
            request, job = wire.recv(stream)
        except wire.ChannelClosed:
            return
        try:
            _serve(clients, request, job, stream, shared_fd)
        except Exception as exc:
            traceback.print_exc()  # to the private client log, for the operator
            wire.send(stream, {"error": type(exc).__name__})
