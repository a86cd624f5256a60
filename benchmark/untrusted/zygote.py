"""The independence check's untrusted side: the zygote, its release workers and the
per-client processes that recompute a sampled client alone.

The zygote is a clean process that only imports modules and forks: started once per run
through the launch (sandboxed on the isolated path), it never receives a function, a
payload or a record. Per release it forks a *release worker*, which receives the pickled
job once and relays; per sampled client the release worker forks a child that runs the
call in a grandchild of its own (:func:`_contained_call`): process 1 of a new PID
namespace where the kernel allows it, in a nested sandbox that writes only a fresh scratch
directory; once it ends, every process it started is dead and the scratch removed. The
trusted side that drives it and compares the rows is
:mod:`benchmark.federation.independence_check`, which also describes the protocol.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import io
import os
import pickle
import shutil
import signal
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from benchmark.federation.clients import ClientBatch, ClientData, client_scope, seeded_rngs
from benchmark.protocol.jobs import BATCH, CLIENT, Rows, load_job, output_rows
from benchmark.protocol.wire import FRAME, read_frame, write_frame


def run_alone(kind: str, fn: Any, payload: Any, records: list[dict[str, Any]], seed: int) -> Rows:
    """One client's call as the pool makes it, with nothing but that client's records."""
    client = ClientData(records, {})
    with client_scope(), seeded_rngs(seed):
        if kind == CLIENT:
            return output_rows(kind, fn(client, payload))
        if kind == BATCH:
            return output_rows(kind, fn(ClientBatch([client]), payload))
        return output_rows(kind, fn(records))


def _answer(meta: dict[str, Any], job: bytearray, call: bytes) -> bytes:
    try:
        fn, payload = load_job(job)
        torch = sys.modules.get("torch")  # imported when the job needs it
        if torch is not None and meta["threads"]:
            torch.set_num_threads(meta["threads"])
        records, seed = pickle.loads(call)
        rows = run_alone(meta["kind"], fn, payload, records, seed)
        buffer = io.BytesIO()
        np.savez(buffer, **{f"r_{name}": array for name, array in rows.items()})
        return b"R" + buffer.getvalue()
    except Exception as exc:
        return b"E" + type(exc).__name__.encode()


def serve(stream: BinaryIO, fd: int) -> None:
    """A release worker's loop (see the module docstring): it only relays, each client is
    computed in a process of its own."""
    write_frame(stream, b"I" + str(os.getpid()).encode())
    header, job = read_frame(stream), read_frame(stream)
    if header is None or job is None:
        return
    meta = pickle.loads(header)
    job = bytearray(job)  # the children's arrays are writable views of it (load_job)
    while (call := read_frame(stream)) is not None:
        write_frame(stream, _alone(meta, job, call, fd))


def _alone(meta: dict[str, Any], job: bytearray, call: bytes, fd: int) -> bytes:
    """One client's answer, computed in a child forked for it: module state left by the
    client before cannot reach it, and without the release's socket (``fd``, closed in the
    child before client code runs) it cannot read the next client's records either."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(fd)
            os.close(read_end)
            _contained_call(meta, job, call, write_end)
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as answers:
        answer = read_frame(answers)
    os.waitpid(pid, 0)
    return answer if answer is not None else b"E" + b"ProcessExited"


def _contained_call(meta: dict[str, Any], job: bytearray, call: bytes, out_fd: int) -> None:
    """Run one call in a grandchild and clean up after it. The grandchild is process 1 of a
    new PID namespace (where the kernel allows one), so every process the call starts
    (a daemon too) is killed when it ends; in a sandboxed zygote it narrows its sandbox to
    write only a scratch directory of its own (and to signal only its own processes),
    which is removed once it ended. Nothing the call leaves reaches a later call."""
    from benchmark.isolation.containment import fork_contained
    from benchmark.isolation.sandbox import applied_policy, kernel_caches, restrict_further

    scratch = None
    if applied_policy is not None:
        scratch = tempfile.mkdtemp(prefix="call-", dir=os.environ.get("TMPDIR"))
    pid = fork_contained()
    if pid == 0:
        try:
            if scratch is not None:
                restrict_further((Path(scratch),))
                if applied_policy.gpu:
                    os.environ.update(kernel_caches(Path(scratch)))
                os.environ["TMPDIR"] = tempfile.tempdir = scratch
            with os.fdopen(out_fd, "wb") as out:
                write_frame(out, _answer(meta, job, call))
        finally:
            os._exit(0)
    os.close(out_fd)
    os.waitpid(pid, 0)
    if scratch is not None:
        shutil.rmtree(scratch, ignore_errors=True)


def _import_all(names: list[str]) -> None:
    for name in names:
        with contextlib.suppress(Exception):  # an alias or a lazy module: the job imports it
            importlib.import_module(name)


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(min(size - len(data), 1 << 20))
        if not chunk:
            raise EOFError("the pool's process closed the control socket")
        data += chunk
    return bytes(data)


def _fork(control: socket.socket, fd: int) -> None:
    """Fork a worker serving one release on ``fd``; it never returns to the zygote's loop."""
    if os.fork() == 0:
        try:
            control.close()  # a worker cannot send the zygote commands
            os.setpgid(0, 0)  # the pool kills the worker and its children as one group
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            quiet = os.open(os.devnull, os.O_WRONLY)
            os.dup2(quiet, 1)
            os.dup2(quiet, 2)
            sock = socket.socket(fileno=fd)
            with sock, sock.makefile("rwb") as stream:
                serve(stream, fd)
        finally:
            os._exit(0)
    os.close(fd)


def zygote(control: socket.socket) -> None:
    """The zygote's loop: import what it is told, fork a worker per socket it is handed."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps finished workers
    while True:
        command, fds, _, _ = socket.recv_fds(control, 1, 1)
        if not command:
            return
        if command == b"P":
            (size,) = FRAME.unpack(_recv_exact(control, FRAME.size))
            _import_all(pickle.loads(_recv_exact(control, size)))
            gc.freeze()  # forked workers need not copy pages to collect these objects
        for fd in fds:
            _fork(control, fd)


def main(fd: int) -> None:
    zygote(socket.socket(fileno=fd))


if __name__ == "__main__":
    main(int(sys.argv[1]))
