"""The page cache of a method process's read set, kept whole while client code runs on the
public schedule.

Client code and a method process read the same files (the interpreter, the packages, the
model caches). A file client code reads enters the page cache, so the method process's own
first read of it afterwards is fast: which of the many cold files it finds fast spells what
client code chose (measured in ``docs/architecture.md``, "the page cache"). Client code
can also evict pages, by filling memory. :func:`keep_resident` closes that channel by
making every page of every file the method process may read resident before it runs again:
then all its reads are equally fast, whatever client code read or evicted. Walking the
tree also brings every file's directory entry and inode back, so ``stat`` of an existing
file is as fast everywhere. The coordinator calls it before the method process starts and
after every pool call on the schedule (:class:`~benchmark.isolation.coordinator.MethodProcess`),
inside the call's slot. Linux only: ``cachestat`` (6.5+), else ``mincore`` on a mapping.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from benchmark.privacy.errors import PrivacyError

_SYS_CACHESTAT = 451  # x86_64
_PAGE = mmap.PAGESIZE
_CHUNK = 1 << 20
_PSEUDO = ("/proc", "/sys", "/dev")  # no page cache behind them


class _Range(ctypes.Structure):
    _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]


class _Stat(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_uint64)
        for name in ("cache", "dirty", "writeback", "evicted", "recently_evicted")
    ]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long]  # fmt: skip
_PROT_READ, _MAP_SHARED, _MAP_FAILED = 1, 1, ctypes.c_void_p(-1).value


def _cachestat(fd: int) -> int | None:
    """Resident pages of the open file ``fd``; None where the kernel has no cachestat."""
    whole, result = _Range(0, 0), _Stat()
    args = (ctypes.c_long(_SYS_CACHESTAT), ctypes.c_int(fd), ctypes.byref(whole))
    if _libc.syscall(*args, ctypes.byref(result), ctypes.c_uint(0)) != 0:
        return None
    return result.cache


def _mincore(fd: int, size: int) -> int:
    """Resident pages of the open file ``fd`` of ``size`` bytes, through a mapping."""
    pages = -(-size // _PAGE)
    address = _libc.mmap(None, ctypes.c_size_t(size), _PROT_READ, _MAP_SHARED, fd, 0)
    if address in (None, _MAP_FAILED):
        return 0
    try:
        vector = (ctypes.c_ubyte * pages)()
        if _libc.mincore(ctypes.c_void_p(address), ctypes.c_size_t(size), vector) != 0:
            return 0
        return pages - bytes(vector).count(0)  # the kernel sets bit 0 only
    finally:
        _libc.munmap(ctypes.c_void_p(address), ctypes.c_size_t(size))


def resident_pages(fd: int, size: int) -> int:
    """How many of the open file's pages are in the page cache."""
    found = _cachestat(fd)
    return _mincore(fd, size) if found is None else found


def regular_files(roots: Iterable[Path]) -> Iterator[str]:
    """Every regular file beneath ``roots`` (or a root that is one), each once: a root
    beneath another, or a link to one (``/lib`` to ``/usr/lib``), is walked with it. Links
    inside are not followed (their targets are readable only where a rule names them, and
    are walked there); ``scandir``'s entry types, so no ``stat`` per file."""
    walked: list[str] = []
    for top in sorted({os.path.realpath(root) for root in roots}):
        if top.startswith(_PSEUDO) or any(_within(top, done) for done in walked):
            continue
        walked.append(top)
        if os.path.isfile(top):
            yield top
        elif os.path.isdir(top):
            yield from _beneath(top)


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _beneath(directory: str) -> Iterator[str]:
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            yield from _beneath(entry.path)
        elif entry.is_file(follow_symlinks=False):
            yield entry.path


@dataclass(frozen=True)
class Residency:
    """What a pass found: the read set's files and bytes, and what it had to read back."""

    files: int
    total_bytes: int
    read_back_bytes: int


def _open(path: str) -> int | None:
    try:  # O_NOATIME: a pass must not move 200k access times (the owner or root only)
        return os.open(path, os.O_RDONLY | os.O_NOATIME | os.O_CLOEXEC)
    except PermissionError:
        pass
    except OSError:
        return None
    try:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None


def _read_back(fd: int, size: int, buffer: bytearray) -> None:
    view, offset = memoryview(buffer), 0
    while offset < size:
        got = os.preadv(fd, [view], offset)
        if got <= 0:
            return
        offset += got


def _pass(files: Iterable[str], buffer: bytearray | None) -> tuple[int, int, int]:
    """One pass over ``files``: their bytes, the bytes not resident and, given a
    ``buffer``, the bytes read back to make them so."""
    total = missing = read_back = 0
    for path in files:
        fd = _open(path)
        if fd is None:
            continue
        try:
            size = os.fstat(fd).st_size
            short = -(-size // _PAGE) - resident_pages(fd, size) if size else 0
            total += size
            if short > 0:
                missing += short * _PAGE
                if buffer is not None:
                    _read_back(fd, size, buffer)
                    read_back += size
        finally:
            os.close(fd)
    return total, missing, read_back


def keep_resident(roots: Iterable[Path], listed: Iterable[Path] = ()) -> Residency:
    """Make every page of every file beneath ``roots`` resident, and the directories
    ``listed`` (those a policy lets be listed, not read) listed once; where any page had to
    be read back, check in a second pass that all stayed (reading can evict what came
    before). Raises :class:`PrivacyError` where the host's memory cannot hold them all
    (client code could then tell files apart by what was evicted)."""
    for directory in listed:
        with contextlib.suppress(OSError):
            os.listdir(directory)
    files = list(regular_files(roots))
    total, _, read_back = _pass(files, bytearray(_CHUNK))
    missing = _pass(files, None)[1] if read_back else 0
    if missing:
        raise PrivacyError(
            f"the page cache could not hold the method process's read set ({missing:,} of "
            f"{total:,} bytes stayed out after it was read back): on this host a method "
            "process could tell which files client code read or evicted by how fast its "
            "own reads are, so the run stops. Run it on a host with more free memory"
        )
    return Residency(len(files), total, read_back)
