"""Entry point of an untrusted child process: tied to its parent's life, sandboxed, then
imports and serves.

``python -m benchmark.isolation.launch ROLE FD...`` applies the sandbox its parent put in
the environment (:func:`~benchmark.isolation.sandbox.enter_sandbox_from_environment`) while
nothing but the standard library and the harness's package roots is imported, then runs the
role's ``main``: ``client`` (:mod:`benchmark.isolation.client_process`), ``method``
(:mod:`benchmark.isolation.method_process`) or ``zygote`` (the independence check's
recomputations, :mod:`benchmark.federation.recompute`, which run client code too). The
roles' modules import numpy, whose OpenBLAS threads would start unrestricted if they were
imported first.
"""

from __future__ import annotations

import importlib
import sys

ROLES = {
    "client": "benchmark.isolation.client_process",
    "method": "benchmark.isolation.method_process",
    "zygote": "benchmark.federation.recompute",
}


def main() -> None:
    from benchmark.isolation.sandbox import die_with_parent, enter_sandbox_from_environment

    role, fds = sys.argv[1], [int(fd) for fd in sys.argv[2:]]
    die_with_parent()
    enter_sandbox_from_environment()
    importlib.import_module(ROLES[role]).main(*fds)


if __name__ == "__main__":
    main()
