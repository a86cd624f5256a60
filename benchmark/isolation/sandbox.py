"""Unprivileged sandbox for the current process, built on Linux Landlock (through ctypes).

Untrusted adapter code runs in child processes that call :func:`restrict` before importing
or running anything of the adapter's. Afterwards the process can read only the paths its
policy names, write only beneath its ``read_write`` paths, bind or connect no TCP socket, and
(on ABI >= 6) neither signal nor reach through abstract unix sockets any process outside its
own Landlock domain. The restriction is inherited by every child and cannot be lifted.

Importing torch needs a writable temporary directory (dill, which it imports, probes
tempfile.gettempdir()): give each domain a private one in ``read_write`` and point TMPDIR at it,
never a /tmp that another domain reads.

Landlock restricts the calling *thread* (and the threads it starts later), so
:func:`restrict` refuses to run once the process has a second thread: call it first.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import platform
import stat
import sys
import sysconfig
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

# x86_64 syscall numbers and the uapi constants of <linux/landlock.h>, <linux/prctl.h>
_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

_FS_EXECUTE, _FS_WRITE_FILE, _FS_READ_FILE, _FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_FS_REFER, _FS_TRUNCATE, _FS_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_FS_ABI1 = (1 << 13) - 1  # EXECUTE .. MAKE_SYM: the 13 rights of ABI 1
# rights that may be granted on a regular file; any other right on a file is EINVAL
_FS_FILE_RIGHTS = _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | _FS_TRUNCATE | _FS_IOCTL_DEV
_FS_READ_ONLY = _FS_EXECUTE | _FS_READ_FILE | _FS_READ_DIR
# always writable: a sink no domain reads back, opened "r+b"/"w" by dill (torch) and subprocess
_SINKS = (Path("/dev/null"),)
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1 << 0, 1 << 1


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # the kernel struct is __attribute__((packed)): 12 bytes
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


@dataclass(frozen=True)
class Policy:
    """What the sandboxed process may touch on disk; paths that do not exist are skipped.

    ``gpu``: a GPU run's process (the trusted coordinator decides, from the run's profile:
    :func:`benchmark.isolation.coordinator.runs_on_gpu`); the child then mounts a private
    ``/dev/shm`` before it restricts itself, and may write there
    (:func:`enter_sandbox_from_environment`). ``devices``: the GPU's device nodes, opened
    read-write; unlike ``read_write`` they stay open to a nested domain
    (:func:`restrict_further`: a recomputation runs client code on the GPU too).
    ``private_scratch``: client code's process, whose scratch directory (its TMPDIR) is
    mounted as a tmpfs of its own (:func:`_private_scratch`), and which may not change its
    working directory (:func:`deny_shared_kernel_objects`)."""

    read_only: tuple[Path, ...]
    read_write: tuple[Path, ...] = ()
    list_only: tuple[Path, ...] = ()  # directories (and those beneath) that may be listed
    gpu: bool = False
    devices: tuple[Path, ...] = ()
    private_scratch: bool = False

    def to_json(self) -> dict[str, Any]:
        """The policy as a child process receives it."""
        return {
            "read_only": list(map(str, self.read_only)),
            "read_write": list(map(str, self.read_write)),
            "list_only": list(map(str, self.list_only)),
            "gpu": self.gpu,
            "devices": list(map(str, self.devices)),
            "private_scratch": self.private_scratch,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Policy:
        read_only, read_write, list_only, devices = (
            tuple(map(Path, data.get(key, ())))
            for key in ("read_only", "read_write", "list_only", "devices")
        )
        gpu, private = data.get("gpu") is True, data.get("private_scratch") is True
        return cls(read_only, read_write, list_only, gpu, devices, private)


def _syscall(number: int, *args: object) -> int:
    """Raw syscall; returns the result or -errno, so callers tell 'unsupported' from failure."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    result = libc.syscall(ctypes.c_long(number), *args)
    return -ctypes.get_errno() if result == -1 else result


def _check(result: int, what: str) -> int:
    if result < 0:
        raise OSError(-result, f"Landlock sandbox: {what} failed: {os.strerror(-result)}")
    return result


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 where Landlock cannot be used at all."""
    if sys.platform != "linux" or platform.machine() != "x86_64":
        return 0
    result = _syscall(
        _SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION)
    )
    if result in (-errno.ENOSYS, -errno.EOPNOTSUPP):
        return 0  # not built in, or built in but disabled at boot
    return _check(result, "landlock_create_ruleset(VERSION)")


def _handled_fs(abi: int) -> int:
    """Every filesystem right the running ABI knows: an unhandled right is an allowed right."""
    rights = _FS_ABI1
    if abi >= 2:
        rights |= _FS_REFER
    if abi >= 3:
        rights |= _FS_TRUNCATE
    if abi >= 5:
        rights |= _FS_IOCTL_DEV
    return rights


def _rule_fd(path: Path) -> int | None:
    """A descriptor naming ``path`` for a Landlock rule: ``O_PATH``, or, in a process whose
    seccomp filter refuses that (a nested domain, :func:`restrict_further`), an ordinary
    open; None where the current domain refuses that too (a nested rule could not grant
    it: ``/proc/self`` is now another process's directory)."""
    try:
        return os.open(path, os.O_PATH | os.O_CLOEXEC)
    except PermissionError:
        pass
    try:
        return os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except PermissionError:
        return None


def _ruleset_attr(abi: int) -> tuple[_RulesetAttr, int]:
    """The attribute and the size this ABI accepts (older kernels reject unknown fields)."""
    attr = _RulesetAttr(handled_access_fs=_handled_fs(abi))
    size = 8
    if abi >= 4:
        attr.handled_access_net = _NET_BIND_TCP | _NET_CONNECT_TCP  # no rule: all denied
        size = 16
    if abi >= 6:
        attr.scoped = _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL
        size = 24
    return attr, size


def _add_path_rule(ruleset_fd: int, path: Path, access: int) -> None:
    try:
        fd = _rule_fd(path)
    except FileNotFoundError:
        return
    if fd is None:
        return
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            access &= _FS_FILE_RIGHTS
        rule = _PathBeneathAttr(allowed_access=access, parent_fd=fd)
        _check(
            _syscall(
                _SYS_ADD_RULE,
                ctypes.c_int(ruleset_fd),
                ctypes.c_int(_RULE_PATH_BENEATH),
                ctypes.byref(rule),
                ctypes.c_uint32(0),
            ),
            f"landlock_add_rule({path})",
        )
        if path.is_relative_to("/proc"):
            _PROC_HELD.append(fd)
            fd = -1
    finally:
        if fd >= 0:
            os.close(fd)


# A rule's descriptors under /proc, held for the process's life. A rule names an inode, and
# proc makes a new inode each time it looks a directory up anew: once the kernel drops the
# directory's unused entry (the coordinator's drop of the directory cache on the schedule,
# or memory pressure), this process's own /proc/<pid> would be another inode, outside its
# rule, and every read of /proc/self refused. An open descriptor keeps the entry in use.
_PROC_HELD: list[int] = []


def _no_new_privs() -> None:
    """Required by landlock_restrict_self for an unprivileged caller; setuid is then inert."""
    libc = ctypes.CDLL(None, use_errno=True)
    args = (ctypes.c_ulong(v) for v in (1, 0, 0, 0))
    if libc.prctl(ctypes.c_int(_PR_SET_NO_NEW_PRIVS), *args) != 0:
        _check(-ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")


# --- seccomp: the kernel objects a sandboxed process may not create or reach ----------------

# x86_64 syscall numbers denied (EPERM) to a sandboxed process and every child it starts. Each
# is a way to share state with another process that the file rules cannot see: new sockets
# of any family (inet, inet6, unix incl. abstract, netlink, packet; the inherited ones to the
# coordinator keep working), SysV and POSIX IPC, file locks and leases, inotify/fanotify and
# page-cache probes on shared files, another process's memory, keyrings, io_uring (which
# opens sockets and files past this filter), namespaces of others, mounts, handles, the
# host's clock and name, the BPF and perf interfaces, and the host's counters that client
# code moves (free memory, load and process count: sysinfo; free blocks of a file system
# it writes: statfs; the kernel log).
_DENIED_SYSCALLS = {
    "socket": 41, "socketpair": 53,
    "shmget": 29, "shmat": 30, "shmctl": 31, "shmdt": 67,
    "semget": 64, "semop": 65, "semctl": 66, "semtimedop": 220,
    "msgget": 68, "msgsnd": 69, "msgrcv": 70, "msgctl": 71,
    "mq_open": 240, "mq_unlink": 241, "mq_timedsend": 242, "mq_timedreceive": 243,
    "mq_notify": 244, "mq_getsetattr": 245,
    "flock": 73,
    "inotify_init": 253, "inotify_add_watch": 254, "inotify_init1": 294,
    "fanotify_init": 300, "fanotify_mark": 301,
    "mincore": 27, "cachestat": 451,
    "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312,
    "pidfd_open": 434, "pidfd_getfd": 438, "pidfd_send_signal": 424,
    "add_key": 248, "request_key": 249, "keyctl": 250,
    "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "setns": 308, "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161,
    "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
    "fspick": 433, "mount_setattr": 442, "name_to_handle_at": 303, "open_by_handle_at": 304,
    "mknod": 133, "mknodat": 259,
    "sethostname": 170, "setdomainname": 171, "settimeofday": 164, "clock_settime": 227,
    "adjtimex": 159, "clock_adjtime": 305,
    "bpf": 321, "perf_event_open": 298,
    "sysinfo": 99, "syslog": 103, "statfs": 137, "fstatfs": 138, "ustat": 136,
    "quotactl": 179, "openat2": 437,
}  # fmt: skip
# Denied unless their target is the caller itself (argument 0 for these, argument 1 for
# setpriority and ioprio_set): another process's scheduling state is readable by pid, so
# setting it would be a channel.
_SELF_ONLY_SYSCALLS = {
    "sched_setaffinity": (203, 0), "sched_setparam": (142, 0), "sched_setscheduler": (144, 0),
    "sched_setattr": (314, 0), "prlimit64": (302, 0), "setpriority": (141, 1),
    "ioprio_set": (251, 1),
}  # fmt: skip
# Denied when their flags (argument 5) ask for RWF_NOWAIT: such a read fails exactly when
# the pages are not in the page cache, a residency probe like mincore (plain preadv2, which
# Python's os.preadv uses, stays allowed).
_NOWAIT_SYSCALLS = {"preadv2": 327, "pwritev2": 328}
_RWF_NOWAIT = 0x8
# Denied when their flags (the argument given) ask for O_PATH: a descriptor Landlock does
# not check, which holds its path's directory entry and inode in the kernel's caches across
# the coordinator's drop of them, so that the method process finds that path fast
# (page_cache.forget_lookups). openat2, whose flags the filter cannot read, is denied.
_PATH_OPEN_SYSCALLS = {"open": (2, 1), "openat": (257, 2)}
_O_PATH = 0o10000000
# Denied to processes that run client code: a working directory holds its entry the same way
# (the launch leaves them in the coordinator's, which client code cannot choose).
_CLIENT_CODE_DENIED = {"chdir": 80, "fchdir": 81}
_FCNTL = 72
# fcntl commands denied: POSIX and open-file-description record locks (F_GETLK, F_SETLK,
# F_SETLKW, F_OFD_*), leases and directory notifications
_FCNTL_DENIED = (5, 6, 7, 36, 37, 38, 1024, 1025, 1026)
_AUDIT_ARCH_X86_64 = 0xC000003E
_X32_SYSCALL_BIT = 0x40000000
_SECCOMP_RET_ALLOW, _SECCOMP_RET_ERRNO = 0x7FFF0000, 0x00050000
_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2
_BPF_LD_W_ABS, _BPF_JEQ, _BPF_JGE, _BPF_JSET, _BPF_RET = 0x20, 0x15, 0x35, 0x45, 0x06


class _SockFilter(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_uint16),
        ("jt", ctypes.c_uint8),
        ("jf", ctypes.c_uint8),
        ("k", ctypes.c_uint32),
    ]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def _seccomp_program(client_code: bool = False) -> list[tuple[int, int, int, int]]:
    """The BPF program: deny (EPERM) every syscall of another ABI (i386, x32), those in
    :data:`_DENIED_SYSCALLS` (and :data:`_CLIENT_CODE_DENIED` for ``client_code``), the
    self-only ones aimed elsewhere, fcntl's lock commands, ``RWF_NOWAIT`` reads and writes
    and ``O_PATH`` opens;
    allow the rest. Jumps are relative, so the program is assembled back to front."""
    deny = (_BPF_RET, 0, 0, _SECCOMP_RET_ERRNO | errno.EPERM)
    allow = (_BPF_RET, 0, 0, _SECCOMP_RET_ALLOW)
    nr, arch = (_BPF_LD_W_ABS, 0, 0, 0), (_BPF_LD_W_ABS, 0, 0, 4)

    def arg(index: int) -> tuple[int, int, int, int]:  # its low 32 bits (little-endian)
        return (_BPF_LD_W_ABS, 0, 0, 16 + 8 * index)

    # blocks of [test..., allow]; each test's true branch is the deny at the program's end
    blocks: list[list[tuple[int, int, int, int]]] = []
    blocks.append([arg(1), *((_BPF_JEQ, "D", 0, cmd) for cmd in _FCNTL_DENIED), allow])
    for _number, index in _SELF_ONLY_SYSCALLS.values():
        blocks.append([arg(index), (_BPF_JEQ, 0, "D", 0), allow])
    for _number in _NOWAIT_SYSCALLS.values():
        blocks.append([arg(5), (_BPF_JSET, "D", 0, _RWF_NOWAIT), allow])
    for _number, index in _PATH_OPEN_SYSCALLS.values():
        blocks.append([arg(index), (_BPF_JSET, "D", 0, _O_PATH), allow])
    head = [arch, (_BPF_JEQ, 1, 0, _AUDIT_ARCH_X86_64), (_BPF_RET, 0, 0, _SECCOMP_RET_ERRNO | 1)]
    head += [nr, (_BPF_JGE, "D", 0, _X32_SYSCALL_BIT)]
    denied = [*_DENIED_SYSCALLS.values(), *(_CLIENT_CODE_DENIED.values() if client_code else ())]
    head += [(_BPF_JEQ, "D", 0, n) for n in denied]
    dispatch = [_FCNTL, *(n for n, _ in _SELF_ONLY_SYSCALLS.values())]
    dispatch += list(_NOWAIT_SYSCALLS.values())
    dispatch += [n for n, _ in _PATH_OPEN_SYSCALLS.values()]
    program = head + [(_BPF_JEQ, f"B{i}", 0, n) for i, n in enumerate(dispatch)] + [allow]
    starts = {}
    for i, block in enumerate(blocks):
        starts[f"B{i}"] = len(program)
        program += block
    starts["D"] = len(program)
    program.append(deny)
    resolved = []
    for at, (code, jt, jf, k) in enumerate(program):
        jt, jf = (starts[j] - at - 1 if isinstance(j, str) else j for j in (jt, jf))
        if not 0 <= jt < 256 or not 0 <= jf < 256:
            raise ValueError("seccomp program: a jump is out of range")
        resolved.append((code, jt, jf, k))
    return resolved


def seccomp_available() -> bool:
    """Whether :func:`deny_shared_kernel_objects` can apply its filter here."""
    return sys.platform == "linux" and platform.machine() == "x86_64"


def deny_shared_kernel_objects(client_code: bool = False) -> bool:
    """Install the seccomp filter of :func:`_seccomp_program` on this process and its future
    children, for good; False (nothing applied) where seccomp filters are unavailable. A
    process that runs ``client_code`` may not change its working directory either.

    Call it after the process has every file descriptor it needs (its sockets to the
    coordinator): from then on it creates no socket of any family, no IPC object, no lock."""
    if not seccomp_available():
        return False
    program = _seccomp_program(client_code)
    filters = (_SockFilter * len(program))(*(_SockFilter(*ins) for ins in program))
    fprog = _SockFprog(len(program), ctypes.cast(filters, ctypes.POINTER(_SockFilter)))
    _no_new_privs()
    libc = ctypes.CDLL(None, use_errno=True)
    mode = ctypes.c_ulong(_SECCOMP_MODE_FILTER)
    if libc.prctl(ctypes.c_int(_PR_SET_SECCOMP), mode, ctypes.byref(fprog), 0, 0) != 0:
        code = ctypes.get_errno()
        if code in (errno.EINVAL, errno.ENOSYS):  # a kernel built without seccomp filters
            return False
        _check(-code, "prctl(PR_SET_SECCOMP)")
    return True


def _thread_count() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1


def restrict(policy: Policy) -> bool:
    """Sandbox the current process for good; False (nothing applied) where Landlock is absent.

    /dev/null is always writable. Raises RuntimeError when the process already runs several
    threads (the others would stay unrestricted) and OSError when a Landlock call fails for any
    reason but absence.
    """
    abi = landlock_abi()
    if abi == 0:
        return False
    if _thread_count() > 1:
        raise RuntimeError("Landlock sandbox: restrict() must run before any thread is started")
    _no_new_privs()
    attr, size = _ruleset_attr(abi)
    ruleset_fd = _check(
        _syscall(
            _SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0)
        ),
        "landlock_create_ruleset",
    )
    try:
        for path in policy.read_only:
            _add_path_rule(ruleset_fd, Path(path), _FS_READ_ONLY)
        for path in policy.list_only:
            _add_path_rule(ruleset_fd, Path(path), _FS_READ_DIR)
        for path in policy.read_write + policy.devices + _SINKS:
            _add_path_rule(ruleset_fd, Path(path), attr.handled_access_fs)
        _check(
            _syscall(_SYS_RESTRICT_SELF, ctypes.c_int(ruleset_fd), ctypes.c_uint32(0)),
            "landlock_restrict_self",
        )
    finally:
        os.close(ruleset_fd)
    return True


# Of the system, what the interpreter and the libraries it loads need: the loader (/lib64)
# and the directories it loads from (loader_directories), the configuration (/etc), the
# locale and time zone data. Not the rest of /usr (compilers, other runtimes, programs):
# least privilege, and every file readable to both client code and a method process must
# be kept resident on the schedule (.page_cache).
_SYSTEM_PATHS = ("/lib64", "/etc", "/usr/lib/locale", "/usr/share/locale", "/usr/share/zoneinfo")
_LOADER_CONFIG = Path("/etc/ld.so.conf")
# Not all of /proc: Landlock's ptrace scoping does not stop reading /proc/<pid>/environ, maps
# or cmdline of other same-user processes (measured on 6.18), and the harness's environment
# may hold tokens. /proc/self resolves, when restrict() opens it, to this process's own pid
# directory, so a child the sandboxed process starts cannot read its own /proc/self. Not the
# host's counters either (/proc/stat, /proc/meminfo, /proc/sys, most of /sys: CPU time,
# free memory, open files, disk sectors, idle states): client code moves them during a call
# and a method process would read them after it, past the public schedule. What is left is
# this process's own state, the CPU model and the CPU lists (glibc, OpenMP and torch count
# CPUs from them).
_PROC_PATHS = ("/proc/self", "/proc/cpuinfo")
_CPU_LISTS = tuple(
    f"/sys/devices/system/cpu/{name}" for name in ("possible", "present", "online", "kernel_max")
)
_DEVICES = ("/dev/null", "/dev/urandom", "/dev/zero")
_PACKAGE_DIR_NAMES = frozenset({"site-packages", "dist-packages", "lib-dynload"})


def _is_package_dir(entry: Path) -> bool:
    """An installed-packages or stdlib entry of sys.path (not a checkout that may hold data)."""
    stdlib = {Path(sysconfig.get_path(name)) for name in ("stdlib", "platstdlib")}
    if entry.name in _PACKAGE_DIR_NAMES or entry in stdlib:
        return True
    return entry.suffix == ".zip" and entry.parent in {p.parent for p in stdlib}


def interpreter_paths() -> tuple[Path, ...]:
    """What this interpreter needs to read to start and import numpy, torch, transformers.

    Leaves out the current directory, the code directories on sys.path, /tmp, /dev/shm and
    other processes' /proc entries: the caller adds the code it wants run, and nothing where
    another domain writes. Without /dev/shm, multiprocessing locks and queues (and so
    DataLoader workers) fail with PermissionError.
    """
    paths = [Path(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)]
    paths.append(Path(os.path.realpath(sys.executable)).parent)
    paths += [Path(e) for e in sys.path if e and _is_package_dir(Path(e))]  # '' is the cwd
    paths += [Path(p) for p in _SYSTEM_PATHS] + list(loader_directories())
    paths += [Path(p) for p in _PROC_PATHS + _CPU_LISTS + _DEVICES]
    return tuple(dict.fromkeys(p for p in paths if p.exists()))


def loader_directories(config: Path = _LOADER_CONFIG) -> tuple[Path, ...]:
    """The directories the dynamic loader loads shared libraries from: those its
    configuration names (``include`` globs followed, as ``ldconfig`` does), and the
    trusted defaults' architecture directories. ``/lib`` and ``/usr/lib`` themselves are
    not among them: on a merged ``/usr`` they hold other runtimes (a JDK, browsers)."""
    found: list[Path] = []
    _read_loader_config(config, found, set())
    triplet = sysconfig.get_config_var("MULTIARCH") or ""
    if triplet:
        found += [Path("/lib") / triplet, Path("/usr/lib") / triplet]
    return tuple(dict.fromkeys(p for p in found if p.is_absolute()))


def _read_loader_config(config: Path, found: list[Path], seen: set[Path]) -> None:
    config = config.resolve()  # an include names it relative to the including file
    if config in seen:
        return
    seen.add(config)
    try:
        lines = config.read_text().splitlines()
    except OSError:
        return
    for line in lines:
        words = line.split("#", 1)[0].split()
        if words[:1] == ["include"]:
            for pattern in words[1:]:
                base = Path(pattern) if Path(pattern).is_absolute() else config.parent / pattern
                for included in sorted(base.parent.glob(base.name)):
                    _read_loader_config(included, found, seen)
        elif words:
            found.append(Path(words[0]))


# --- the accelerator: what a GPU run's untrusted processes may open besides -----------------

DEV = Path("/dev")
SHM = Path("/dev/shm")
# The NVIDIA driver's device nodes besides the GPUs' own (/dev/nvidia0, ...): the control
# node, unified memory and its tools node, the MIG capabilities. CUDA opens them read-write
# and drives the GPU through their ioctls. Not /dev/dri (display, not compute).
_GPU_NODES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-caps")
# The driver's state CUDA and NVML read (its version and parameters, the GPUs' bus ids).
# NVML and CUDA read the PCI devices and NUMA nodes from /sys: a GPU run's processes read
# all of /sys (its counters included; docs/architecture.md, "the GPU").
_GPU_DRIVER_STATE = (Path("/proc/driver/nvidia"), Path("/sys"))
# What a CUDA process needs of the coordinator's environment: which GPU is the run's (Ray
# and the operator set it), where the driver and the toolkit's libraries are, the
# allocator's settings. Named one by one: no ``NVIDIA_*`` prefix (NVIDIA_API_KEY is a key).
GPU_ENVIRONMENT = (
    "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_HOME", "CUDA_PATH",
    "CUDA_MODULE_LOADING", "LD_LIBRARY_PATH", "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES", "PYTORCH_CUDA_ALLOC_CONF",
)  # fmt: skip


def gpu_devices(dev: Path = DEV) -> tuple[Path, ...]:
    """The NVIDIA device nodes present under ``dev``: every GPU's (which one a run uses is
    ``CUDA_VISIBLE_DEVICES``'s choice, not a sandbox rule) and the driver's."""
    gpus = sorted(p for p in dev.glob("nvidia*") if p.name.removeprefix("nvidia").isdigit())
    return (*gpus, *(dev / name for name in _GPU_NODES if (dev / name).exists()))


def gpu_library_paths(environ: Mapping[str, str], exposed: tuple[Path, ...]) -> tuple[Path, ...]:
    """The CUDA toolkit and the directories the loader is pointed at (``CUDA_HOME``,
    ``CUDA_PATH``, ``LD_LIBRARY_PATH``), to read: absolute entries only, and none that is
    ``/`` or holds one of ``exposed`` (the working directory, the home directory: a loader
    path must not open a checkout's splits and results, or a user's keys)."""
    entries = [environ.get("CUDA_HOME", ""), environ.get("CUDA_PATH", "")]
    entries += environ.get("LD_LIBRARY_PATH", "").split(os.pathsep)
    kept = []
    for entry in entries:
        if not entry or not os.path.isabs(entry):
            continue
        path = Path(os.path.realpath(entry))
        held = (Path(os.path.realpath(e)) for e in exposed)
        if path != Path("/") and not any(path == e or path in e.parents for e in held):
            kept.append(Path(entry))
    return tuple(dict.fromkeys(kept))


def gpu_access(
    environ: Mapping[str, str] = os.environ, dev: Path = DEV
) -> tuple[tuple[Path, ...], tuple[Path, ...]]:
    """What a GPU run's untrusted process may read, and open read-write, beyond a CPU
    run's: the driver's state and the CUDA libraries; the device nodes. ``/dev/shm`` is not
    among them: the child mounts a private one (:func:`enter_sandbox_from_environment`)."""
    exposed = (Path.cwd(), Path.home())
    return (*_GPU_DRIVER_STATE, *gpu_library_paths(environ, exposed)), gpu_devices(dev)


def readable_except(
    paths: tuple[Path, ...], denied: tuple[Path, ...]
) -> tuple[tuple[Path, ...], tuple[Path, ...]]:
    """``paths`` less the files beneath ``denied``: what stays readable, and the
    directories to grant listing only. Landlock only allows, so a path that holds a denied
    one is replaced by its entries (those on the way down, recursively) and may be listed
    (``importlib.metadata`` and the import system list ``site-packages``; a listing shows
    names, not contents); a path beneath a denied one is dropped."""
    kept, listed = _readable_except(paths, tuple(os.path.realpath(d) for d in denied))
    return tuple(dict.fromkeys(kept)), tuple(dict.fromkeys(listed))


def beneath(path: str, root: str) -> bool:
    """Whether the real path ``path`` is ``root`` or lies below it (string prefixes: a
    policy walks thousands of entries, and pathlib's ``parents`` made that seconds)."""
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _readable_except(paths: tuple[Path, ...], denied: tuple[str, ...]) -> tuple[list, list]:
    kept: list[Path] = []
    listed: list[Path] = []
    for path in paths:
        real = os.path.realpath(path)
        if any(beneath(real, d) for d in denied):
            continue
        if any(beneath(d, real) for d in denied):  # holds a denied path: go down
            try:
                entries = tuple(sorted(Path(real).iterdir()))
            except OSError:
                continue
            below, below_listed = _readable_except(entries, denied)
            kept += below
            listed += [path, *below_listed]
        else:
            kept.append(path)
    return kept, listed


def import_top_level_packages() -> None:
    """Import the harness's top-level packages before :func:`restrict`: the checkout that
    holds them is not readable afterwards (it may hold splits and results), so Python could
    no longer find them there; their submodules are found through the packages' own
    directories, which the policy names."""
    import importlib

    for name in ("benchmark", "methods"):
        importlib.import_module(name)


SANDBOX_ENV = "FEDSYNTH_SANDBOX"  # the policy a parent hands its child (JSON)


def sandbox_environment(policy: Policy, tmp_dir: Path) -> dict[str, str]:
    """Environment entries that make a child started through
    :mod:`benchmark.isolation.launch` sandbox itself with ``policy`` and use ``tmp_dir``
    (which must be in ``policy.read_write``) as its TMPDIR."""
    return {SANDBOX_ENV: json.dumps({**policy.to_json(), "tmp_dir": str(tmp_dir)})}


def enter_sandbox_from_environment() -> bool:
    """Apply the policy in :data:`SANDBOX_ENV`, if any; True when a sandbox was applied.

    Runs before numpy or torch is imported: OpenBLAS and OpenMP start their thread pools at
    import, and Landlock (ABI < 8) restricts only the calling thread."""
    global applied_policy
    raw = os.environ.pop(SANDBOX_ENV, "")
    if not raw:
        return False
    data = json.loads(raw)
    os.environ["TMPDIR"] = data["tmp_dir"]
    tempfile.tempdir = None  # a launch template's imports may have cached its own
    import_top_level_packages()
    policy = Policy.from_json(data)
    if policy.private_scratch:
        _private_scratch(Path(data["tmp_dir"]))
    if policy.gpu:
        policy = _with_gpu_scratch(policy, Path(data["tmp_dir"]))
    from benchmark.isolation.containment import isolate_branch_predictors

    if not isolate_branch_predictors():
        print(BRANCHES_SHOWN, file=sys.stderr, flush=True)
    landlock = restrict(policy)
    deny_shared_kernel_objects(client_code=policy.private_scratch)
    applied_policy = policy if landlock else None
    return landlock


applied_policy: Policy | None = None  # what enter_sandbox_from_environment applied here


def kernel_caches(scratch: Path) -> dict[str, str]:
    """Where Triton and CUDA cache compiled kernels, in a GPU run's process: its own
    scratch (their defaults are under the home directory, which it cannot write)."""
    return {"TRITON_CACHE_DIR": str(scratch / "triton"), "CUDA_CACHE_PATH": str(scratch / "cuda")}


BRANCHES_SHOWN = (
    "fedsynth: the kernel offers no per-process flush of the branch predictors here: what "
    "client code trains them with may show in a method process's timing"
)

SCRATCH_SHOWN = (
    "fedsynth: this client-side process's scratch directory is on the host's file system "
    "(no mount namespace here): a method process can stat the files client code writes there"
)


def _private_scratch(tmp_dir: Path) -> None:
    """Client code's scratch (a client worker's, the independence check's): a tmpfs of this
    process's own over ``tmp_dir``, so what client code writes there (names, sizes, times)
    no method process can ``stat`` (Landlock restricts reads, not ``stat``)."""
    from benchmark.isolation.containment import private_tmpfs

    if not private_tmpfs(str(tmp_dir), mode="0700"):
        print(SCRATCH_SHOWN, file=sys.stderr, flush=True)


def _with_gpu_scratch(policy: Policy, tmp_dir: Path) -> Policy:
    """A GPU run's process: ``/dev/shm`` writable where it is this process's own (a fresh
    tmpfs in a mount namespace of its own; never the host's, which every process shares),
    and the kernel caches of Triton and CUDA in its scratch directory (their defaults are
    under the home directory, which the sandbox does not let it write)."""
    from benchmark.isolation.containment import private_tmpfs

    os.environ.update(kernel_caches(tmp_dir))
    if not private_tmpfs(str(SHM)):
        return policy
    return replace(policy, read_write=(*policy.read_write, SHM))


def restrict_further(read_write: tuple[Path, ...]) -> bool:
    """Narrow this process's sandbox (a nested Landlock domain, inherited by its children):
    the same reads and devices as :data:`applied_policy` (a GPU run's), writes only beneath
    ``read_write`` (not its ``/dev/shm``, which every call of this domain would share), and
    no signal to any process outside the new domain. False where no sandbox was applied."""
    if applied_policy is None:
        return False
    read_only, list_only = applied_policy.read_only, applied_policy.list_only
    devices = applied_policy.devices
    return restrict(Policy(read_only, tuple(read_write), list_only, devices=devices))
