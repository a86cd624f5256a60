"""Entry point of an untrusted child process: tied to its parent's life, contained, sandboxed,
then imports and serves.

``python -m benchmark.isolation.launch ROLE FD...`` moves into fresh PID, network, IPC and
UTS namespaces (:func:`~benchmark.isolation.containment.contain`: this process stays
outside as the keeper, the role runs as process 1 of the namespace, and every process it
starts dies with it), gives itself a mount namespace in which every mount is ``noatime``
and ``/proc`` is its PID namespace's own
(:func:`~benchmark.isolation.containment.hide_access_times`,
:func:`~benchmark.isolation.containment.own_proc`), applies the sandbox its parent put in
the environment
(:func:`~benchmark.isolation.sandbox.enter_sandbox_from_environment`: Landlock, then the
seccomp filter) while nothing but the standard library and the harness's package roots is
imported, then runs the role's ``main``: ``client``
(:mod:`benchmark.untrusted.client_worker`), ``method``
(:mod:`benchmark.untrusted.method_process`) or ``zygote`` (the independence check's
recomputations, :mod:`benchmark.untrusted.zygote`, which run client code too). The
roles' modules import numpy, whose OpenBLAS threads would start unrestricted if they were
imported first.
"""

from __future__ import annotations

import importlib
import os
import sys

ROLES = {
    "client": "benchmark.untrusted.client_worker",
    "method": "benchmark.untrusted.method_process",
    "zygote": "benchmark.untrusted.zygote",
}


NO_NAMESPACES = (
    "fedsynth: no new namespaces for this untrusted process (neither root nor unprivileged "
    "user namespaces are allowed here): processes it daemonises may outlive its run; "
    "sockets and IPC objects are still refused by seccomp"
)
ACCESS_TIMES_SHOWN = (
    "fedsynth: the files this untrusted process reads keep no private access times here "
    "(no mount namespace, or the host's atime flags are locked to this user): the files it "
    "reads may be told by their access times unless the file system is mounted noatime"
)
HOST_PROC_SHOWN = (
    "fedsynth: this untrusted process sees the host's /proc (no /proc of its own here): it "
    "can stat other processes' entries and read host thread ids"
)


def main() -> None:
    from benchmark.isolation.containment import (
        contain,
        die_with_parent,
        hide_access_times,
        own_proc,
    )
    from benchmark.isolation.sandbox import enter_sandbox_from_environment

    role, fds = sys.argv[1], [int(fd) for fd in sys.argv[2:]]
    die_with_parent()
    contained = contain(tuple(fds))
    if not contained:
        print(NO_NAMESPACES, file=sys.stderr, flush=True)
    if not hide_access_times():
        print(ACCESS_TIMES_SHOWN, file=sys.stderr, flush=True)
    if not (contained and own_proc()):
        print(HOST_PROC_SHOWN, file=sys.stderr, flush=True)
    enter_sandbox_from_environment()
    importlib.import_module(ROLES[role]).main(*fds)
    # Served: end now. The interpreter's teardown (torch's, transformers') holds nothing the
    # harness reads, and the coordinator waits for this exit after every run.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
