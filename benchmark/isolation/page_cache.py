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
file is as fast everywhere; :func:`forget_lookups`, first, drops the entries lookups of
missing names left. The coordinator calls it before the method process starts and
after every pool call on the schedule (:class:`~benchmark.isolation.coordinator.MethodProcess`),
inside the call's slot. Linux only: ``cachestat`` (6.5+), else ``mincore`` on a mapping.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import mmap
import os
import sys
import time
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from benchmark.isolation.sandbox import beneath
from benchmark.privacy.errors import PrivacyError

_SYS_CACHESTAT = 451  # the same number on every architecture (Linux 6.5+)
_PAGE = mmap.PAGESIZE
_CHUNK = 1 << 20
_PSEUDO = ("/proc", "/sys", "/dev")  # no page cache behind them
_POLL_S, _POLL_TRIES = 0.05, 200  # read-ahead (not a read: see _read_back) lands within 10 s


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
_libc.mlock.argtypes = _libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_PROT_READ, _MAP_SHARED, _MAP_FAILED = 1, 1, ctypes.c_void_p(-1).value


def _pages(size: int) -> int:
    return -(-size // _PAGE)


def _cachestat(fd: int) -> int | None:
    """Resident pages of the open file ``fd``; None where the kernel has no cachestat."""
    whole, result = _Range(0, 0), _Stat()
    args = (ctypes.c_long(_SYS_CACHESTAT), ctypes.c_int(fd), ctypes.byref(whole))
    if _libc.syscall(*args, ctypes.byref(result), ctypes.c_uint(0)) != 0:
        return None
    return result.cache


def _mincore(fd: int, size: int) -> int | None:
    """Resident pages of the open file ``fd`` of ``size`` bytes, through a mapping; None
    where it cannot be mapped."""
    pages = _pages(size)
    address = _libc.mmap(None, ctypes.c_size_t(size), _PROT_READ, _MAP_SHARED, fd, 0)
    if address in (None, _MAP_FAILED):
        return None
    try:
        vector = (ctypes.c_ubyte * pages)()
        if _libc.mincore(ctypes.c_void_p(address), ctypes.c_size_t(size), vector) != 0:
            return None
        return pages - bytes(vector).count(0)  # the kernel sets bit 0 only
    finally:
        _libc.munmap(ctypes.c_void_p(address), ctypes.c_size_t(size))


def resident_pages(fd: int, size: int, may_map: bool = True) -> int | None:
    """How many of the open file's pages are in the page cache; None where it cannot be
    told. ``cachestat`` first; a short count is checked through a mapping, which an
    overlay file system (a container's root) redirects to the real file, whose pages
    ``cachestat`` on the overlay does not see. Mapping moves the access time of a file
    not opened ``O_NOATIME``: pass ``may_map=False`` for those."""
    found = _cachestat(fd)
    if (found is not None and found >= _pages(size)) or not may_map:
        return found
    mapped = _mincore(fd, size)
    return found if mapped is None else mapped


def regular_files(roots: Iterable[Path]) -> Iterator[str]:
    """Every regular file beneath ``roots`` (or a root that is one), each once: a root
    beneath another, or a link to one (``/lib`` to ``/usr/lib``), is walked with it. Links
    inside are looked up (their own entries, restored) but not followed: their targets are
    readable only where a rule names them, and are walked there. ``scandir``'s entry types,
    so no ``stat`` per file."""
    walked: list[str] = []
    for top in sorted({os.path.realpath(root) for root in roots}):
        if any(beneath(top, done) for done in (*_PSEUDO, *walked)):
            continue
        walked.append(top)
        if os.path.isfile(top):
            yield top
        elif os.path.isdir(top):
            yield from _files_below(top)


def _files_below(top: str) -> Iterator[str]:
    pending = [top]
    while pending:
        try:
            entries = list(os.scandir(pending.pop()))
        except OSError:
            continue
        for entry in entries:
            if entry.is_symlink():
                with contextlib.suppress(OSError):
                    os.readlink(entry.path)  # its entry, inode and target text
            elif entry.is_dir(follow_symlinks=False):
                pending.append(entry.path)
            elif entry.is_file(follow_symlinks=False):
                yield entry.path


@dataclass(frozen=True)
class Residency:
    """What a pass found: the read set's files and bytes, and what it had to read back."""

    files: int
    total_bytes: int
    read_back_bytes: int


@dataclass
class _Pass:
    total: int = 0
    missing: int = 0  # bytes of pages not resident (or not known to be)
    read_back: int = 0
    short: list[str] = field(default_factory=list)  # the files with such pages


_READ = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK  # never blocks on a FIFO put there


def _open(path: str) -> tuple[int, bool] | None:
    """The file open for reading, and whether reads of it keep its access time
    (``O_NOATIME``: the owner's or root's only)."""
    try:
        return os.open(path, _READ | os.O_NOATIME), True
    except PermissionError:
        pass
    except OSError:
        return None
    try:
        return os.open(path, _READ), False
    except OSError:
        return None


def _read_back(fd: int, size: int, keeps_atime: bool, buffer: bytearray) -> None:
    """Bring the file's pages in: a read where it keeps the access time; else read-ahead
    (``POSIX_FADV_WILLNEED``), which does not move it but lands later. A read that moved
    the access time of a file client code had evicted would tell the method process
    which (any process may ``stat`` it)."""
    if not keeps_atime:
        for offset in range(0, size, _CHUNK):
            os.posix_fadvise(fd, offset, _CHUNK, os.POSIX_FADV_WILLNEED)
        return
    view, offset = memoryview(buffer), 0
    while offset < size:
        try:
            got = os.preadv(fd, [view], offset)
        except OSError:
            return  # the check pass reports it
        if got <= 0:
            return
        offset += got


def _pass(files: Iterable[str], buffer: bytearray | None, pins: Pins | None = None) -> _Pass:
    """One pass over ``files``: what is not resident and, given a ``buffer``, read back;
    given ``pins``, each file locked (which also brings its pages in) if not yet."""
    found = _Pass()
    for path in files:
        opened = _open(path)
        if opened is None:
            continue
        fd, keeps_atime = opened
        try:
            info = os.fstat(fd)
            if pins is not None:
                pins.admit(fd, info, path)
            size = info.st_size
            pages = _pages(size)
            resident = resident_pages(fd, size, may_map=keeps_atime) if size else 0
            found.total += size
            short = pages if resident is None else pages - resident
            if short > 0:
                found.missing += short * _PAGE
                found.short.append(path)
                if buffer is not None:
                    _read_back(fd, size, keeps_atime, buffer)
                    found.read_back += size
        finally:
            os.close(fd)
    return found


DROP_CACHES = Path("/proc/sys/vm/drop_caches")


def forget_lookups(directory_blocks: bool = False) -> bool:
    """Drop the kernel's unused directory entries and inodes (``drop_caches`` 2; root only),
    the negative entries among them: a lookup of a name that does not exist leaves one, and
    a later lookup of that name is faster, so the names client code looked up would show in
    the method process's timing. With ``directory_blocks``, every page nothing maps or
    locks goes too (``drop_caches`` 1): the blocks a lookup read from the disk (the
    directory's, its inode's), which stay in the block device's page cache after the
    entries go, so a later lookup in a directory outside the read set would be faster by a
    disk read. Only where the read set is locked: else its own pages would go, and the walk
    would read them all back. The read set's locked pages stay (its inodes are in use;
    this kernel, 6.18, kept unused inodes' pages too on a drop of 2, older ones may not);
    :func:`keep_resident` then brings its entries and directories, and any page that went,
    back. False where the kernel refuses (not root): those lookups then stay visible."""
    try:  # 4: the kernel logs the drop only once
        DROP_CACHES.write_text("7" if directory_blocks else "6")
    except OSError:
        return False
    return True


MAX_MAP_COUNT = Path("/proc/sys/vm/max_map_count")
MAP_HEADROOM = 65_536  # mappings left to the coordinator's own needs once the set is locked
_CHECK_EVERY = 256 << 20  # bytes locked between checks of the memory left


def pin_margin() -> int:
    """Memory that must stay available once the read set is locked: the run's own (its
    method process, client worker and models), a quarter of the host's and at least 2 GiB."""
    return max(2 << 30, meminfo_bytes("MemTotal") // 4)


class Pins:
    """The read set's pages locked in memory for a run: a shared read-only mapping of each
    file, ``mlock``-ed. The page cache evicts the least recently used pages first, so under
    memory pressure (the method process's own allocations) the files client code did not
    read would go first, and the method process could time which; client code could also
    evict pages by filling memory. Locked pages go for neither. :meth:`plan` decides once,
    for the whole read set, whether the host has room (memory that stays available,
    mappings); then the walk (:func:`keep_resident`) locks each file it meets, and a file
    replaced since is locked anew (its old pages unlocked). :meth:`release` unlocks them
    all (the coordinator, at the run's end; else when this object is collected). Where the
    host cannot, nothing stays locked and it says so once: the walk still restores
    residency, not the order."""

    def __init__(self) -> None:
        self._held: dict[str, tuple[int, int, int, int]] = {}  # path: dev, inode, address, size
        self._finalizer = weakref.finalize(self, _unmap_all, self._held)
        self._unchecked = 0
        self.planned = False
        self.refused: str | None = None
        # Set once the first walk (before any client code) is done: a later refusal would
        # follow the memory client code holds, so it stops the run rather than be recorded.
        self.final = False

    def plan(self, files: list[str]) -> None:
        """Once: refuse unless the whole of ``files`` fits with :func:`pin_margin` left and
        :data:`MAP_HEADROOM` mappings to spare (root raises ``vm.max_map_count`` to that)."""
        if self.planned:
            return
        self.planned = True
        total = 0
        for path in files:
            with contextlib.suppress(OSError):
                total += os.stat(path).st_size
        available, margin = meminfo_bytes("MemAvailable"), pin_margin()
        if available - total < margin:
            self._refuse(f"{total:,} bytes to lock, {available:,} available, {margin:,} kept")
            return
        with open("/proc/self/maps") as maps:
            needed = sum(1 for _ in maps) + len(files) + MAP_HEADROOM
        if int(MAX_MAP_COUNT.read_text()) < needed:
            try:
                MAX_MAP_COUNT.write_text(str(needed))
            except OSError:
                self._refuse(f"{needed:,} mappings needed (vm.max_map_count)")

    def admit(self, fd: int, info: os.stat_result, path: str) -> None:
        """Lock the pages of the open file ``fd`` (``info``: its ``fstat``) if not yet."""
        if self.refused is not None or not self.planned or not info.st_size:
            return
        held = self._held.get(path)
        if held is not None and held[:2] == (info.st_dev, info.st_ino) and held[3] == info.st_size:
            return
        if held is not None:
            _unmap(self._held.pop(path))
        self._unchecked += info.st_size
        if self._unchecked >= _CHECK_EVERY:
            self._unchecked = 0
            if meminfo_bytes("MemAvailable") - info.st_size < pin_margin():
                self._refuse("too little memory would stay available")
                return
        address = _libc.mmap(None, ctypes.c_size_t(info.st_size), _PROT_READ, _MAP_SHARED, fd, 0)
        if address in (None, _MAP_FAILED):
            if ctypes.get_errno() == errno.ENOMEM:
                self._refuse(f"mmap of {path}: {os.strerror(errno.ENOMEM)}")
            return  # a file that cannot be mapped: the walk still keeps it resident
        if _libc.mlock(ctypes.c_void_p(address), ctypes.c_size_t(info.st_size)) != 0:
            error = os.strerror(ctypes.get_errno())
            _unmap((0, 0, address, info.st_size))
            self._refuse(f"mlock of {path}: {error}")
            return
        self._held[path] = (info.st_dev, info.st_ino, address, info.st_size)

    def _refuse(self, why: str) -> None:
        self.release()
        if self.final:
            raise PrivacyError(
                f"a file of the method process's read set could not be locked in memory "
                f"during the run ({why}); the run stops: whether it could follows how much "
                "memory client code holds"
            )
        self.refused = why
        print(f"{PINS_REFUSED}: {why}", file=sys.stderr, flush=True)

    def release(self) -> None:
        _unmap_all(self._held)


def _unmap(held: tuple[int, int, int, int]) -> None:
    _libc.munmap(ctypes.c_void_p(held[2]), ctypes.c_size_t(held[3]))


def _unmap_all(held: dict[str, tuple[int, int, int, int]]) -> None:
    for mapping in held.values():
        _unmap(mapping)
    held.clear()


PINS_REFUSED = (
    "fedsynth: the method process's read set is not locked in memory here, so the order in "
    "which client code read its files may show in the method process's reads under memory "
    "pressure"
)


def meminfo_bytes(name: str) -> int:
    with open("/proc/meminfo") as lines:
        for line in lines:
            if line.startswith(f"{name}:"):
                return int(line.split()[1]) * 1024
    return 0


def keep_resident(
    roots: Iterable[Path], listed: Iterable[Path] = (), pins: Pins | None = None
) -> Residency:
    """Make every page of every file beneath ``roots`` resident (and locked, given
    ``pins``), and list the directories ``listed`` (those a policy lets be listed, not
    read). Where any page had to be brought back, wait until those are resident, then check
    in a last pass that all the others stayed (bringing pages in can evict others). Raises
    :class:`PrivacyError` where that fails: the host's memory cannot hold them all, or its
    file system does not tell (client code could then tell files apart by what was
    evicted)."""
    for directory in listed:
        with contextlib.suppress(OSError):
            os.listdir(directory)
    files = list(regular_files(roots))
    if pins is not None:
        pins.plan(files)
    first = _pass(files, bytearray(_CHUNK), pins)
    last = _Pass()
    if first.read_back:
        pending = first.short
        for _ in range(_POLL_TRIES):
            pending = _pass(pending, None).short
            if not pending:
                break
            time.sleep(_POLL_S)
        last = _pass(files, None)
    if last.missing:
        raise PrivacyError(
            f"{last.missing:,} of {first.total:,} bytes of the method process's read set "
            f"could not be made resident in the page cache (first: {last.short[0]}): the "
            "host's memory cannot hold them, or its file system does not tell. A method "
            "process could then tell which files client code read or evicted by how fast "
            "its own reads are, so the run stops. Run it on a host with more free memory"
        )
    return Residency(len(files), first.total, first.read_back)
