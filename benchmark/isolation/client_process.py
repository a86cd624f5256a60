"""The coordinator's handle on the client worker, the process that holds the train shards
and runs client-side code (:mod:`benchmark.untrusted.client_worker`).

A method's client-side functions arrive there as snapshot blobs
(:func:`benchmark.protocol.jobs.snapshot`: a protocol-5 pickle with its arrays out of
band), from the method's process, forwarded unopened by the coordinator. The worker runs
them on its clients, as :class:`~benchmark.federation.pool.ClientPool` would in process
(inside :func:`client_scope`, under :func:`seeded_rngs` with the seeds the coordinator
sends), and returns per-client rows as ``.npy`` arrays (a large batch through a shared
memory file), which the coordinator clips, sums and noises.

Nothing else it says is repeated: every value that leaves it is either a row (clipped and
noised before anyone sees it) or a fact the coordinator checks against a fixed vocabulary.
An exception is reported as a built-in class name or "an exception"
(:func:`~benchmark.federation.client_errors.error_class`), never its text; a malformed or
oversized answer, a crash, an exit code, or a call past its time bound is one fixed
refusal; the payload counts the records publish are declared by the method side, not
measured here. The worker's stdout and stderr (a client function's prints, the traceback of
its exceptions) go to the run's private client log (``runs/<key>/client_private.log``),
which only the coordinator's user can read: no method process, no record and no terminal
shows them. Between calls the worker is stopped (``SIGSTOP`` to its process group and to
every process below it, :func:`~benchmark.isolation.containment.signal_tree`), so a
thread or a process a client function leaves running cannot use the CPU while the method
process computes, a contention channel to the method's own timing.

It starts through the launch (:mod:`benchmark.isolation.launch`, forked from the launch
template or from a fresh interpreter), which sandboxes itself first
(:mod:`benchmark.isolation.sandbox`: read-only code and models, only its own scratch
directory writable, no network, no signals), then receives the shards and serves.
A function that keeps a client's data in a module global can only fold it into later rows,
which the coordinator's independence check (:mod:`benchmark.federation.independence_check`) and
per-row clipping bound.

Protocol (:mod:`benchmark.protocol.wire`): an ``init`` message (threads)
with the shards as a JSON blob; then requests ``rows`` (job blob; indices, seeds, batched,
dim) answered by one ``row`` message per client (or one for a batch) and a ``done``;
``all`` (job blob) answered by ``done`` with the cloudpickled result (the non-private
bound's centralized training); ``memos`` / ``load_memos`` (the clients' client-side
caches, torch-saved, for checkpoints).
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import numpy as np

from benchmark.federation.client_errors import error_class
from benchmark.isolation.bounds import RequestBounds
from benchmark.isolation.containment import signal_tree
from benchmark.isolation.sandbox import GPU_ENVIRONMENT, Policy, sandbox_environment
from benchmark.isolation.template import spawn
from benchmark.privacy.errors import PrivacyError
from benchmark.protocol import wire

# What runs around a request that wakes the worker outside a pool call (its memos): nothing,
# unless the method process puts it on its schedule (coordinator.MethodProcess).
OUTSIDE_CALLS: Callable[[], AbstractContextManager[None]] = contextlib.nullcontext


class MemoHolding:
    """The clients' memos for a checkpoint, fetched (``_fetch_memos``) either at once or,
    on a public schedule, at the end of the pool call that last ran client code
    (:meth:`hold_memos`, inside that call's slot): memos change only while client code
    runs, so the round's checkpoint then takes the held copy and needs no slot of its own.
    After :meth:`load_memos` the loaded copy is held. A checkpoint with no call since
    client code last ran (a round without pool calls) fetches inside ``outside_calls``, a
    slot of its own."""

    outside_calls: Callable[[], AbstractContextManager[None]] = OUTSIDE_CALLS
    _held: Any = None  # the memos as of now, or None once client code may have changed them

    def _fetch_memos(self) -> Any:
        raise NotImplementedError

    def _client_code_runs(self) -> None:
        self._held = None

    def hold_memos(self) -> None:
        """Fetch and hold the memos unless the held copy is still current."""
        if self._held is None:
            self._held = self._fetch_memos()

    def memos(self) -> Any:
        """The clients' memos as a byte tensor (a checkpoint stores it unopened)."""
        if self._held is not None:
            return self._held
        with self.outside_calls():
            return self._fetch_memos()


SHARED_BLOCK_BYTES = 1 << 25  # ... and come out of it in blocks of about this size


class ClientFunctionError(PrivacyError):
    """A client-side function raised: the run stops (a raise is itself an unnoised signal)."""


# The one refusal for any answer of the worker that is not rows of the announced form: the
# worker runs client code, so how it failed (a crash, an exit code, a malformed or oversized
# message, its size or dtype) is not described.
MALFORMED = (
    "the client worker ended or answered out of protocol; the run stops (how it failed is "
    "not reported: client code controls it)"
)


NO_LOCAL_CLIENTS = (
    "pool.dp_sgd is not available in an isolated run: its per-example clipping and noise "
    "would run beside the method's code in the client worker; use pool.aggregate with one "
    "example per privacy unit"
)


class ClientProcess(MemoHolding):
    """The coordinator's handle on a client worker holding ``clients`` (records per client)."""

    def __init__(
        self,
        clients: list[list[dict[str, Any]]],
        policy: Policy | None,
        threads: int,
        tmp_dir: Path,
        log: Path | None = None,
        bounds: RequestBounds | None = None,
        fresh: bool = False,
    ) -> None:
        ours, theirs = wire.stream_pair()
        self._rows_fd = os.memfd_create("fedsynth-rows", os.MFD_CLOEXEC)
        sandbox = sandbox_environment(policy, tmp_dir) if policy else {}
        self.bounds = bounds or RequestBounds.from_environment()
        gpu = policy is not None and policy.gpu
        with private_log(log) as output:
            self.proc = spawn(
                "client",
                (theirs.fileno(), self._rows_fd),
                {**child_env(gpu), **sandbox},
                stdout=output,
                stderr=output,
                process_group=True,  # stopped and continued as a whole
                fresh=fresh,
                gpu=gpu,
            )
        theirs.close()
        self._sock = ours
        self._stream = ours.makefile("rwb")
        init = {"op": "init", "threads": threads}
        wire.send(self._stream, init, json.dumps(clients).encode())
        self.payload_counts = (0, 0)  # declared by the method side for each call (coordinator)

    def _request(self, header: dict[str, Any], *blobs: bytes) -> None:
        """Wake the worker and send it a request; its answers are read with a deadline."""
        if header["op"] in ("rows", "all"):
            self._client_code_runs()
        self._signal(signal.SIGCONT)
        self._sock.settimeout(self.bounds.call_seconds)
        wire.send(self._stream, header, *blobs)

    def _answer(self) -> wire.Message:
        """The worker's next answer; any failure is one of two fixed refusals (a raise, by
        its built-in class; anything else, :data:`MALFORMED`), or the time bound's."""
        try:
            header, blobs = wire.recv(self._stream, self.bounds.message_bytes)
        except TimeoutError:
            self._signal(signal.SIGKILL)
            raise ClientFunctionError(
                f"the client side took longer than the harness's bound of "
                f"{self.bounds.call_seconds:,} s for one pool call (call_seconds); the run "
                "stops. An operator can raise it with FEDSYNTH_BOUND_CALL_SECONDS"
            ) from None
        except (wire.ChannelClosed, OSError):
            raise ClientFunctionError(MALFORMED) from None
        if "error" in header or header.get("done"):
            self._signal(signal.SIGSTOP)  # idle until the next request
        if "error" in header:
            raise ClientFunctionError(
                f"a client-side function raised {error_class(header['error'])}; the run stops "
                "(exceptions and their messages never reach the server)"
            )
        return header, blobs

    def _signal(self, number: int) -> None:
        signal_tree(self.proc.pid, number)

    def rows(
        self, job: bytes, indices: list[int], seeds: list[int], batched: bool
    ) -> Iterator[np.ndarray]:
        """The rows as the worker computes them (the pool counts and checks them); sets
        :attr:`payload_counts` once the worker is done."""
        request = {"op": "rows", "indices": indices, "seeds": seeds, "batched": batched}
        self._request(request, job)
        while True:
            header, blobs = self._answer()
            if header.get("done"):
                return
            if header.get("shared"):
                yield from self._shared_rows(header)
            elif len(blobs) == 1:
                yield wire.array_from(blobs[0])
            else:
                raise ClientFunctionError(MALFORMED)

    def _shared_rows(self, header: dict[str, Any]) -> Iterator[np.ndarray]:
        """A batched call's rows, written by the worker into the shared memory file: numbers
        of the announced shape, streamed out in blocks of about ``SHARED_BLOCK_BYTES``, each
        a copy (the worker could still write there), so the pool clips and sums one block
        while the next is still in the file, never holding all of them at once."""
        try:
            dtype = np.dtype(str(header["dtype"]))
            shape = tuple(int(n) for n in header["shape"])
        except (TypeError, ValueError, KeyError):
            raise ClientFunctionError(MALFORMED) from None
        if dtype.kind not in "fiu" or len(shape) != 2 or min(shape) < 0:
            raise PrivacyError("client-side functions must return numbers, one row per client")
        size = shape[0] * shape[1] * dtype.itemsize
        if size == 0:
            yield np.zeros(shape, dtype)
            return
        if size > self.bounds.message_bytes or os.fstat(self._rows_fd).st_size < size:
            raise ClientFunctionError(MALFORMED)
        step = max(1, SHARED_BLOCK_BYTES // (shape[1] * dtype.itemsize))
        with mmap.mmap(self._rows_fd, size, prot=mmap.PROT_READ) as view:
            rows = np.frombuffer(view, dtype, shape[0] * shape[1]).reshape(shape)
            try:
                for start in range(0, shape[0], step):
                    yield rows[start : start + step].copy()
            finally:
                del rows  # the map closes only once no array views it

    def run_all(self, job: bytes) -> bytes:
        """The cloudpickled result of a centralized job, unopened (for the method process)."""
        self._request({"op": "all"}, job)
        return self._blob()

    def _blob(self) -> bytes:
        """The one blob of a ``done`` answer."""
        blobs = self._answer()[1]
        if len(blobs) != 1:
            raise ClientFunctionError(MALFORMED)
        return blobs[0]

    def local_clients(self) -> list[Any]:
        raise PrivacyError(NO_LOCAL_CLIENTS)

    def _fetch_memos(self) -> Any:
        import torch

        self._request({"op": "memos"})
        return torch.frombuffer(bytearray(self._blob()), dtype=torch.uint8)

    def load_memos(self, state: Any) -> None:
        with self.outside_calls():
            self._request({"op": "load_memos"}, state.numpy().tobytes())
            self._answer()
        self._held = state

    def close(self) -> None:
        self._signal(signal.SIGCONT)  # a stopped worker cannot see its input end
        self._stream.close()
        self._sock.close()
        os.close(self._rows_fd)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# What an untrusted child inherits of the coordinator's environment: locale, threads and
# the cache locations; not tokens, keys or anything else set there.
CHILD_ENVIRONMENT = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "XDG_CACHE_HOME", "HF_HOME")
CHILD_ENVIRONMENT_PREFIXES = ("OMP_", "MKL_", "OPENBLAS_", "TORCH_", "FEDSYNTH_CACHE")
# Always offline, whatever the coordinator's (a GPU run's fetches hub models first): the
# sandbox refuses sockets, and a hub library that tried one would fail, not read its cache.
CHILD_OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def child_env(gpu: bool = False) -> dict[str, str]:
    """The environment of an untrusted child: an allow-list of the parent's, offline, and
    the import path made absolute (the child must not depend on its working directory). A GPU
    run's child (``gpu``, as its sandbox policy says) also keeps what CUDA needs
    (:data:`~benchmark.isolation.sandbox.GPU_ENVIRONMENT`: its GPU, the driver's libraries)."""
    named = CHILD_ENVIRONMENT + (GPU_ENVIRONMENT if gpu else ())
    keep = {
        key: value
        for key, value in os.environ.items()
        if key in named or key.startswith(CHILD_ENVIRONMENT_PREFIXES)
    }
    paths = [p or os.getcwd() for p in sys.path]
    fixed = {**CHILD_OFFLINE, "TOKENIZERS_PARALLELISM": "false"}
    return {**keep, **fixed, "PYTHONPATH": os.pathsep.join(paths)}


PRIVATE_LOG = "client_private.log"  # in the run directory: the client worker's output


@contextlib.contextmanager
def private_log(path: Path | None) -> Iterator[Any]:
    """Where a client worker's stdout and stderr go: ``path``, created readable by this
    user only and appended to, else nowhere. Client code writes them, so they may hold
    private text; they never go to the operator's terminal."""
    if path is None:
        yield subprocess.DEVNULL
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    try:
        yield fd
    finally:
        os.close(fd)
