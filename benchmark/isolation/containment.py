"""Fresh Linux namespaces for an untrusted process, so that nothing it starts outlives it and
nothing it names is another sandbox's.

:func:`contain` moves the calling process's future children into new PID, network, IPC and
UTS namespaces and forks: the child is process 1 of the new PID namespace, and when it
ends the kernel kills every process left in that namespace, a daemon that called
``setsid`` and forked twice included. The network namespace has only a loopback device,
down (no route to anything, and its own abstract unix socket names); the IPC namespace has
its own SysV objects and POSIX message queues; the UTS namespace its own host name. The
caller (the *keeper*) only waits for the child and exits as it did; the child is tied to
the keeper by ``PR_SET_PDEATHSIG``, so killing the keeper (or the keeper's parent, to
which the keeper is tied the same way) kills the whole namespace.

Creating namespaces needs ``CAP_SYS_ADMIN`` (root, as in CI) or an unprivileged user
namespace; where neither is allowed :func:`contain` does nothing and returns False: the
seccomp filter (:func:`benchmark.isolation.sandbox.deny_shared_kernel_objects`) still
refuses sockets and IPC objects, but a daemonised grandchild then outlives its process.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import sys

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID, CLONE_NEWNET = 0x20000000, 0x40000000
NAMESPACES = CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS
PR_SET_PDEATHSIG = 1


PR_SET_SPECULATION_CTRL, PR_SPEC_INDIRECT_BRANCH, PR_SPEC_FORCE_DISABLE = 53, 1, 8


def isolate_branch_predictors() -> bool:
    """Have the kernel flush the CPU's indirect branch predictors whenever it switches into
    or out of this process (IBPB), for good: what client code trained them with is then no
    channel to a method process that times its own branches afterwards, nor the other way.
    Only where the kernel offers it per process (``IBPB: conditional`` in
    ``/sys/devices/system/cpu/vulnerabilities/spectre_v2``); a forced setting is inherited
    by children and cannot be undone. False where the kernel refuses."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    args = (PR_SPEC_INDIRECT_BRANCH, PR_SPEC_FORCE_DISABLE, 0, 0)
    return libc.prctl(ctypes.c_int(PR_SET_SPECULATION_CTRL), *map(ctypes.c_ulong, args)) == 0


def die_with_parent(parent: int | None = None) -> None:
    """Have the kernel kill this process (SIGKILL) when its parent ends, so an untrusted
    child of a coordinator that crashed or was killed does not run on, unwatched, on the
    host; exits at once if the parent ended while the tie was being made, or is not
    ``parent`` (a forked child names the pid its parent had before the fork). Without
    ``parent``, one that ended before this process read its pid is not caught (the window
    is the interpreter's start-up; the child then ends at its next read of the parent's
    socket). Linux only."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid() if parent is None else parent
    libc = ctypes.CDLL(None, use_errno=True)
    args = (ctypes.c_ulong(v) for v in (9, 0, 0, 0))  # SIGKILL
    if libc.prctl(ctypes.c_int(PR_SET_PDEATHSIG), *args) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"prctl(PR_SET_PDEATHSIG): {os.strerror(code)}")
    if os.getppid() != parent:
        os._exit(1)


def _unshare(flags: int) -> bool:
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.unshare(ctypes.c_int(flags)) == 0


def new_namespaces(flags: int = NAMESPACES) -> bool:
    """Unshare ``flags`` (as root, else inside a new user namespace); False if neither is
    allowed. A new PID namespace takes effect for the caller's children, not the caller."""
    if not sys.platform.startswith("linux"):
        return False
    return _unshare(flags) or _unshare(flags | CLONE_NEWUSER)


_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REC, _MS_PRIVATE = 0x2, 0x4, 0x8, 0x4000, 0x40000
# mount_setattr(2): the same number on every Linux architecture since 5.12.
_SYS_MOUNT_SETATTR, _AT_FDCWD, _AT_RECURSIVE = 442, -100, 0x8000
_MOUNT_ATTR_NOATIME, _MOUNT_ATTR_ATIME_MASK = 0x10, 0x70


class _MountAttr(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in ("set", "clear", "propagation", "userns")]


def _private_mounts() -> bool:
    """Move this process into a new mount namespace whose mounts no longer propagate to
    (or from) the one it came from; False where none can be made."""
    if not new_namespaces(CLONE_NEWNS):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.mount(b"none", b"/", None, ctypes.c_ulong(_MS_REC | _MS_PRIVATE), None) == 0


def hide_access_times() -> bool:
    """Make every file this process (and what it starts) reads keep its access time: all
    mounts ``noatime`` in a mount namespace of its own. Otherwise client code could signal
    to another sandbox by which shared read-only files it reads (a file's atime, which any
    process may ``stat``, moves on a read under ``relatime``). False where it cannot be done
    (no mount namespace; as an unprivileged user the host's atime flags are locked). Linux
    only; call it before the sandbox (which forbids mounts)."""
    if not _private_mounts():
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    attr = _MountAttr(_MOUNT_ATTR_NOATIME, _MOUNT_ATTR_ATIME_MASK, 0, 0)
    call = (
        ctypes.c_long(_SYS_MOUNT_SETATTR), ctypes.c_int(_AT_FDCWD), b"/",
        ctypes.c_uint(_AT_RECURSIVE), ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)),
    )  # fmt: skip
    return libc.syscall(*call) == 0


def own_proc() -> bool:
    """Mount a ``/proc`` of this process's PID namespace over the host's, in its own mount
    namespace: it then shows no other process on the host (not even to ``stat``), and its
    thread ids are the namespace's, so neither tells how many processes client code
    started elsewhere. Call it as process 1 of a new PID namespace (:func:`contain`);
    False where it cannot be done. Linux only."""
    if not _private_mounts():  # never over the /proc of the namespace it came from
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    flags = ctypes.c_ulong(_MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    return libc.mount(b"proc", b"/proc", b"proc", flags, None) == 0


def private_tmpfs(path: str, mode: str = "1777") -> bool:
    """Give this process (and what it starts) a directory ``path`` of its own: a fresh,
    empty tmpfs mounted there in a new mount namespace. What it writes there no other
    process sees, not even by ``stat`` (which Landlock does not restrict), and it sees
    nothing another wrote. False, and nothing mounted, where a mount namespace cannot be
    made. Linux only; call it before the sandbox (which forbids mounts)."""
    if not _private_mounts():
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    flags = ctypes.c_ulong(_MS_NOSUID | _MS_NODEV)
    return libc.mount(b"tmpfs", path.encode(), b"tmpfs", flags, f"mode={mode}".encode()) == 0


def contain(keep_fds: tuple[int, ...] = ()) -> bool:
    """Continue in a child that is process 1 of new namespaces (see the module docstring);
    the caller becomes its keeper and never returns. ``keep_fds`` are closed in the keeper,
    so the child alone holds them (its peer sees their end when the child ends). False,
    and nothing done, where namespaces cannot be created."""
    if not new_namespaces():
        return False
    alive_r, alive_w = os.pipe()  # the child sees EOF here once the keeper is gone
    pid = os.fork()
    if pid == 0:
        os.close(alive_w)
        die_with_parent()
        if select.select([alive_r], [], [], 0)[0]:  # the keeper ended before the tie held
            os._exit(1)
        os.close(alive_r)
        return True
    os.close(alive_r)
    for fd in keep_fds:
        os.close(fd)
    _keep(pid)
    raise AssertionError("unreachable")


def _keep(pid: int) -> None:
    """The keeper: wait for the child and end as it ended (its exit code or its signal)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the child handles the terminal's ^C
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except ChildProcessError:
            os._exit(1)
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):
        signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(status))
    os._exit(os.waitstatus_to_exitcode(status) & 0xFF)


def fork_contained() -> int:
    """``os.fork`` into a new PID namespace where allowed (the child, process 1 there, takes
    every process it starts with it when it ends): 0 in the child, its pid in the parent.
    The parent must wait for the child; the namespace is dead once ``waitpid`` returns."""
    new_namespaces(CLONE_NEWPID)
    return os.fork()


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                found += [int(child) for child in f.read().split()]
        except OSError:
            continue
    return found


def descendants(pid: int) -> set[int]:
    """Every process below ``pid``, however it left its process group (``setsid``,
    ``setpgid``): in a PID namespace an orphan is adopted by the namespace's init, so it
    stays below. Empty where the kernel lists no children (``/proc/*/task/*/children``)."""
    found: set[int] = set()
    pending = [pid]
    while pending:
        for child in _children(pending.pop()):
            if child not in found:
                found.add(child)
                pending.append(child)
    return found


def signal_tree(pid: int, number: int) -> None:
    """Send ``number`` to ``pid``'s process group and to every process below ``pid``
    (:func:`descendants`), until no new one appears: a stop must reach a process client
    code moved into a session of its own, and one forked while the stops were sent."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, number)
    signalled: set[int] = set()
    while fresh := descendants(pid) - signalled:
        for member in fresh:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(member, number)
        signalled |= fresh
