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
~0.5 GB); past them, the least recently used template with no child alive is ended to make
room, and where every one has children, a fresh interpreter. Its memory
is the template's, which has seen only earlier children's requests (their environment and
sandbox policy), never data. A GPU run's child forks only from a template whose imports
left the CUDA driver unloaded (:func:`cuda_driver_loaded`: a process that initialised CUDA
cannot hand it to a forked child; one that only imported torch can, as a
``DataLoader``'s forked workers do); else, and wherever no template can run (no pidfd), it
gets a fresh interpreter.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib
import json
import os
import random
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmark.isolation.containment import die_with_parent
from benchmark.isolation.sandbox import SANDBOX_ENV

LAUNCH = "benchmark.isolation.launch"  # sandboxes a child before it imports numpy
TEMPLATE_IMPORTS = ("numpy", "torch", "transformers", "transformers.modeling_utils")
_PID = struct.Struct("<q")
_MAX_FDS = 8
READY = b"ready"  # what a template says once it has imported, then whether CUDA was loaded
CUDA_DRIVER = "libcuda.so"  # the driver library: mapped once anything initialised CUDA
READY_SECONDS = 600  # its imports, on a loaded machine
ANSWER_SECONDS = 60  # a fork and a pidfd


class ForkedChild:
    """A child forked by the template, watched through its pidfd (it is not the
    coordinator's child): the part of :class:`subprocess.Popen` the coordinator uses. As
    with ``Popen``, its pid stays reserved (the template reaps it only when asked) until
    :meth:`poll` or :meth:`wait` sees it end, so signals by pid never reach another
    process."""

    def __init__(self, pid: int, pidfd: int, template: _Template) -> None:
        self.pid, self._pidfd, self._template = pid, pidfd, template
        self._ended = False
        self._seen = threading.Lock()  # one of the threads that watch it sees it end

    def poll(self) -> int | None:
        """None while it runs; its exit code is its parent's to read, so 0 once ended."""
        return 0 if self._has_ended(0) else None

    def wait(self, timeout: float | None = None) -> int:
        if not self._has_ended(timeout):
            raise subprocess.TimeoutExpired(f"forked {self.pid}", timeout or 0)
        return 0

    def _has_ended(self, timeout: float | None) -> bool:
        if not self._ended:
            watch = select.poll()
            watch.register(self._pidfd, select.POLLIN)
            if not watch.poll(None if timeout is None else int(timeout * 1000)):
                return False
            with self._seen:
                if self._ended:
                    return True
                self._ended = True
            self._template.reap(self.pid)  # once: the template's count of live children
        return True

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)

    def __del__(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._pidfd)


class _Template:
    """The coordinator's handle on a template process: started, then ready once it has
    imported (or refused, :class:`OSError`, and ended)."""

    def __init__(self, env: dict[str, str]) -> None:
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
        self.control.settimeout(READY_SECONDS)
        try:
            ready = self.control.recv(len(READY) + 1)
        except OSError:
            ready = b""
        if ready[: len(READY)] != READY or len(ready) != len(READY) + 1:
            self.end()
            raise OSError("the launch template did not start")
        self.cuda_driver = ready[-1:] == b"1"  # its children could not use CUDA
        self.live = 0  # children forked and not yet seen to end: it may not end before them
        self.control.settimeout(ANSWER_SECONDS)

    def fork(self, request: dict[str, Any], fds: list[int]) -> ForkedChild | None:
        """The forked child; None where the template could not fork (no child exists). A
        template that takes the request and then fails to answer is ended, and with it any
        child it forked, before the error is raised."""
        socket.send_fds(self.control, [json.dumps(request).encode()], fds)
        try:
            message, received, _, _ = socket.recv_fds(self.control, _PID.size, 1)
            pid = _PID.unpack(message)[0]
        except (OSError, struct.error):
            self.end()
            raise OSError("the launch template ended while forking") from None
        if pid < 0:
            return None
        self.live += 1
        return ForkedChild(pid, received[0], self)

    def reap(self, pid: int) -> None:
        with _lock, contextlib.suppress(OSError):
            self.live -= 1
            self.control.send(json.dumps({"reap": pid}).encode())

    def end(self) -> None:
        self.control.close()
        self.proc.kill()
        self.proc.wait()


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
    fresh: bool = False,
    gpu: bool = False,
) -> Any:
    """Start ``python -m benchmark.isolation.launch role *fds`` with ``env`` (the child's
    whole environment), forked from the template where its environment allows, else as a
    fresh interpreter. ``stdout``/``stderr``: a descriptor, ``subprocess.DEVNULL``, or None
    (this process's). ``fresh`` children always start fresh: the one worker of a Ray actor
    (a template would not pay). A ``gpu`` child (it will use CUDA) starts fresh where the
    template's imports loaded the CUDA driver. Returns a :class:`ForkedChild` or a
    :class:`subprocess.Popen`."""
    base = {k: v for k, v in env.items() if k != SANDBOX_ENV}
    template = None if fresh or not hasattr(os, "pidfd_open") else _template_for(base)
    if template is not None and gpu and template.cuda_driver:
        template = None
    if template is not None:
        forked = _fork(template, role, fds, dict(env), stdout, stderr, process_group)
        if forked is not None:
            return forked
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
    use. Where :data:`MAX_TEMPLATES` others run, the least recently used one with no child
    alive is ended to make room; None where every one has children, or where none starts."""
    key = json.dumps([base, os.getcwd()], sort_keys=True)
    with _lock:
        found = _templates.pop(key, None)
        if found is not None and found.proc.poll() is None:
            _templates[key] = found  # now the most recently used
            return found
        for ended in [k for k, t in _templates.items() if t.proc.poll() is not None]:
            del _templates[ended]
        if len(_templates) >= MAX_TEMPLATES:
            idle = [k for k, t in _templates.items() if t.live == 0]
            if not idle:
                return None
            _templates.pop(idle[0]).end()
        try:
            _templates[key] = _Template(base)
        except OSError:
            return None
        return _templates[key]


def _forget_templates() -> None:
    """In a forked copy of this process: no templates, and a lock no other thread holds."""
    global _lock
    _lock = threading.Lock()
    _templates.clear()


os.register_at_fork(after_in_child=_forget_templates)


def _fork(
    template: _Template,
    role: str,
    fds: Sequence[int],
    env: dict[str, str],
    stdout: int | None,
    stderr: int | None,
    process_group: bool,
) -> ForkedChild | None:
    with open(os.devnull, "rb+") as null:
        streams = [null.fileno()]
        for stream, own in ((stdout, 1), (stderr, 2)):
            streams.append(null.fileno() if stream == subprocess.DEVNULL else stream or own)
        request = {"role": role, "fds": list(fds), "env": env, "process_group": process_group}
        with _lock:
            return template.fork(request, [*streams, *fds])


# --- the template process --------------------------------------------------------------


def serve(control_fd: int) -> None:
    """The template: import, say it is ready, then fork one child per request until the
    control socket closes (the coordinator ended: the template ends at once, without the
    interpreter's finalisation, and its children, tied to it, with it). A child is reaped
    only when the coordinator asks (it saw the child end), so its pid is not reused while
    the coordinator may signal it. A terminal's ^C is the coordinator's to handle."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for name in TEMPLATE_IMPORTS:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    if "torch" in sys.modules:  # its CPU detection (cpuinfo), read once here, not per child
        sys.modules["torch"].backends.cpu.get_cpu_capability()
    control = socket.socket(fileno=control_fd)
    os.close(os.pidfd_open(os.getpid()))  # raises where pidfds are refused: never ready
    control.send(READY + (b"1" if cuda_driver_loaded() else b"0"))
    while True:
        message, fds, _, _ = socket.recv_fds(control, 1 << 20, _MAX_FDS)
        if not message:  # at once: the interpreter's finalisation (torch's) takes seconds
            os._exit(0)
        request = json.loads(message)
        if "reap" in request:
            with contextlib.suppress(OSError):
                os.waitpid(int(request["reap"]), os.WNOHANG)
        else:
            _answer(control, request, fds)


def cuda_driver_loaded(maps: str = "/proc/self/maps") -> bool:
    """Whether this process has the CUDA driver library mapped: loaded by the runtime's
    first call (``cuInit``), never by importing torch, whose CUDA libraries load the driver
    lazily. A process that never loaded it has no CUDA state a forked child could inherit."""
    with open(maps) as lines:
        paths = (line.split(maxsplit=5)[5:] for line in lines)
        return any(Path(path[0].strip()).name.startswith(CUDA_DRIVER) for path in paths if path)


def _answer(control: socket.socket, request: dict[str, Any], fds: list[int]) -> None:
    """Fork the child of ``request`` and send its pid and pidfd; pid -1 and nothing else
    where it could not be forked and watched (a child forked but not watchable is killed
    before it runs anything of its role)."""
    template = os.getpid()
    try:
        pid = os.fork()
    except OSError:
        pid = -1
    if pid == 0:
        _become(control, request, fds, template)
    for fd in fds:
        os.close(fd)
    pidfd = -1
    if pid > 0:
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pid = -1
    if pid < 0:
        control.send(_PID.pack(-1))
        return
    try:
        socket.send_fds(control, [_PID.pack(pid)], [pidfd])
    finally:
        os.close(pidfd)


def _become(control: socket.socket, request: dict[str, Any], fds: list[int], template: int) -> None:
    """In the forked child: tie its life to the template's, drop what the template holds,
    take the request's streams, environment and process group, draw fresh seeds for the
    global RNGs the template's imports seeded, and run the launch (never returns)."""
    try:
        die_with_parent(template)
        control.close()
        signal.signal(signal.SIGINT, signal.default_int_handler)
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
        random.seed()
        if "numpy" in sys.modules:
            sys.modules["numpy"].random.seed()
        sys.argv = [LAUNCH, request["role"], *map(str, passed)]
        from benchmark.isolation import launch

        launch.main()
    finally:
        os._exit(1)


if __name__ == "__main__":
    serve(int(sys.argv[1]))
