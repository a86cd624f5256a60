"""Untrusted children forked from a pre-imported template instead of a fresh interpreter.

Each isolated run starts three untrusted processes (the method process, the client worker
and the independence check's zygote), and each used to import torch and transformers
from scratch: seconds of CPU apiece. :func:`spawn` instead asks a *template*, one per
coordinator process, to fork the child.

The template is trusted. The coordinator starts it with an untrusted child's environment
(:func:`~.client_process.child_env`: an allow-list, nothing secret), and it imports only
the third-party libraries of :data:`TEMPLATE_IMPORTS`: never the harness's adapters, never
client code. It starts no thread, computes nothing, and receives no data, only requests to
fork.

A forked child first closes the template's control socket and every descriptor it was not
handed. It then takes its environment, its standard streams and its process group, and
runs exactly what ``python -m benchmark.isolation.launch ROLE FD...`` runs: namespaces,
``noatime`` mounts, its own ``/proc``, Landlock, seccomp, then the role. What it holds
beyond a fresh interpreter is the imported libraries' state, computed from the same
environment: a template serves only children whose environment (but for the sandbox
policy) and working directory are the ones it imported under, and another environment
gets a template of its own, up to :data:`MAX_TEMPLATES` (each holds its imports' memory,
~0.5 GB, for as long as the coordinator runs); past them, a fresh interpreter. Its memory
is the template's, which has seen only earlier children's requests (their environment and
sandbox policy), never data. A GPU run's child and every request where no template can
run (no pidfd) get a fresh interpreter too.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from benchmark.isolation.sandbox import SANDBOX_ENV

LAUNCH = "benchmark.isolation.launch"  # sandboxes a child before it imports numpy
TEMPLATE_IMPORTS = ("numpy", "torch", "transformers", "transformers.modeling_utils")
_PID = struct.Struct("<q")
_MAX_FDS = 8


class ForkedChild:
    """A child forked by the template, watched through its pidfd (it is not the
    coordinator's child): the part of :class:`subprocess.Popen` the coordinator uses."""

    def __init__(self, pid: int, pidfd: int) -> None:
        self.pid, self._pidfd = pid, pidfd

    def poll(self) -> int | None:
        """None while it runs; its exit code is its parent's to read, so 0 once ended."""
        return 0 if select.select([self._pidfd], [], [], 0)[0] else None

    def wait(self, timeout: float | None = None) -> int:
        if not select.select([self._pidfd], [], [], timeout)[0]:
            raise subprocess.TimeoutExpired(f"forked {self.pid}", timeout or 0)
        return 0

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)

    def __del__(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._pidfd)


class _Template:
    """The coordinator's handle on its template process."""

    def __init__(self, env: dict[str, str]) -> None:
        self.owner = os.getpid()
        self.control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", __name__, str(theirs.fileno())],
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        theirs.close()

    def fork(self, request: dict[str, Any], fds: list[int]) -> ForkedChild:
        socket.send_fds(self.control, [json.dumps(request).encode()], fds)
        message, received, _, _ = socket.recv_fds(self.control, _PID.size, 1)
        if len(message) != _PID.size or len(received) != 1:
            raise OSError("the launch template ended")
        return ForkedChild(_PID.unpack(message)[0], received[0])


# This process's templates by the environment and directory they imported under (the
# import path names the directory): a few, since each holds its imports' memory.
_templates: dict[str, _Template] = {}
MAX_TEMPLATES = 3
_lock = threading.Lock()


def spawn(
    role: str,
    fds: Sequence[int],
    env: Mapping[str, str],
    stdout: int | None = None,
    stderr: int | None = None,
    process_group: bool = False,
    gpu: bool = False,
) -> Any:
    """Start ``python -m benchmark.isolation.launch role *fds`` with ``env`` (the child's
    whole environment), forked from the template where its environment allows, else as a
    fresh interpreter. ``stdout``/``stderr``: a descriptor, ``subprocess.DEVNULL``, or None
    (this process's). A ``gpu`` child always starts fresh: CUDA cannot be used in a child
    forked from a process where an import touched it. Returns a :class:`ForkedChild` or a
    :class:`subprocess.Popen`."""
    base = {k: v for k, v in env.items() if k != SANDBOX_ENV}
    template = None if gpu or not hasattr(os, "pidfd_open") else _template_for(base)
    if template is not None:
        return _fork(template, role, fds, dict(env), stdout, stderr, process_group)
    return subprocess.Popen(
        [sys.executable, "-m", LAUNCH, role, *map(str, fds)],
        pass_fds=tuple(fds),
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=stderr,
        env=dict(env),
        process_group=0 if process_group else None,
    )


def _template_for(base: dict[str, str]) -> _Template | None:
    """This process's template for ``base`` in the current directory, started on first
    use; None where it cannot be started, or where :data:`MAX_TEMPLATES` others run."""
    key = json.dumps([base, os.getcwd()], sort_keys=True)
    with _lock:
        if any(t.owner != os.getpid() for t in _templates.values()):
            _templates.clear()  # a forked copy of the coordinator starts templates of its own
        found = _templates.get(key)
        if found is not None and found.proc.poll() is None:
            return found
        for ended in [k for k, t in _templates.items() if t.proc.poll() is not None]:
            del _templates[ended]
        if len(_templates) >= MAX_TEMPLATES:
            return None
        try:
            _templates[key] = _Template(base)
        except OSError:
            return None
        return _templates[key]


def _fork(
    template: _Template,
    role: str,
    fds: Sequence[int],
    env: dict[str, str],
    stdout: int | None,
    stderr: int | None,
    process_group: bool,
) -> ForkedChild:
    with contextlib.ExitStack() as stack:
        null = stack.enter_context(open(os.devnull, "rb+"))  # noqa: SIM115
        streams = [null.fileno()]
        for stream, own in ((stdout, 1), (stderr, 2)):
            streams.append(null.fileno() if stream == subprocess.DEVNULL else stream or own)
        request = {"role": role, "fds": list(fds), "env": env, "process_group": process_group}
        with _lock:
            return template.fork(request, [*streams, *fds])


# --- the template process --------------------------------------------------------------


def serve(control_fd: int) -> None:
    """The template: import, then fork one child per request until the control socket
    closes (the coordinator ended: the template ends, and its children, tied to it, with
    it). Children that ended are reaped before each fork, never sooner, so the pid of a
    child is not reused before the template has opened its pidfd."""
    for name in TEMPLATE_IMPORTS:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    control = socket.socket(fileno=control_fd)
    while True:
        message, fds, _, _ = socket.recv_fds(control, 1 << 20, _MAX_FDS)
        if not message:
            return
        _reap()
        pid = os.fork()
        if pid == 0:
            _become(control, json.loads(message), fds)
        for fd in fds:
            os.close(fd)
        pidfd = os.pidfd_open(pid)
        try:
            socket.send_fds(control, [_PID.pack(pid)], [pidfd])
        finally:
            os.close(pidfd)


def _reap() -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def _become(control: socket.socket, request: dict[str, Any], fds: list[int]) -> None:
    """In the forked child: drop what the template holds, take the request's streams,
    environment and process group, and run the launch (never returns)."""
    try:
        control.close()
        numbers = [0, 1, 2, *request["fds"]]  # the coordinator's numbers, as Popen keeps them
        above = max([*numbers, *fds]) + 1
        moved = [fcntl.fcntl(fd, fcntl.F_DUPFD, above) for fd in fds]
        for fd, number in zip(moved, numbers, strict=True):
            os.dup2(fd, number)
        passed = request["fds"]
        kept = sorted({2, *passed})  # and 0, 1: every other descriptor is closed
        for low, high in zip(kept, [*kept[1:], os.sysconf("SC_OPEN_MAX")], strict=True):
            os.closerange(low + 1, high)
        if request["process_group"]:
            os.setpgid(0, 0)
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = [LAUNCH, request["role"], *map(str, passed)]
        from benchmark.isolation import launch

        launch.main()
    finally:
        os._exit(1)


if __name__ == "__main__":
    serve(int(sys.argv[1]))
