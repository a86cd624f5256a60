"""The CPU's data caches, refilled with the coordinator's own data before a method process
on the public schedule runs again.

A method process and the client worker share physical memory: the pages of every file both
map (the interpreter's libraries, the packages, the model caches, which the page cache
holds once) and what both inherit, copy-on-write, from one launch template. A line of that
memory that client code touched stays in the CPU's caches after its call, and the method
process can time its own access to each line (flush and reload; or, without sharing, time
which of its own lines client code evicted, prime and probe): which lines were fast spells
what client code chose. :class:`CacheSweep` reads a buffer larger than every cache level
on every online CPU, inside the call's slot, after the page cache's walk, so the caches
hold the sweep's lines whatever client code did (measured in ``docs/architecture.md``,
"the CPU's caches"). Caches the kernel describes under
``/sys/devices/system/cpu/cpu*/cache`` only: a GPU's stays open; the branch predictors are
the kernel's to flush (:func:`~.containment.isolate_branch_predictors`).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np

CACHES = Path("/sys/devices/system/cpu")
_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
# Swept at least: twice the largest last level one socket of today's servers has (504 MB).
# A virtual machine's kernel lists the caches its hypervisor describes, which need not be
# the host's (QEMU's default describes a 16 MB last level whatever the host has).
FLOOR_BYTES = 1 << 30
# The buffer is read a chunk at a time, each chunk twice before the next: a second read
# hits, so every cache level takes the sweep's lines for reused ones. A cache that guards
# itself against one-pass scans (adaptive insertion; a last level that keeps only the
# lines its upper levels reused) would otherwise keep the lines client code read thrice.
CHUNK_BYTES = 256 << 10  # fits the smallest second-level cache x86 servers have
READS_PER_CHUNK = 2


def _size(text: str) -> int:
    text = text.strip()
    return int(text[:-1]) * _UNITS[text[-1]] if text[-1:] in _UNITS else int(text)


def largest_cache_bytes(cpus: set[int]) -> int:
    """The largest data or unified cache any of ``cpus`` has (a shared last-level cache is
    listed under each CPU that shares it); 0 where the kernel lists none."""
    largest = 0
    for cpu in cpus:
        for index in (CACHES / f"cpu{cpu}" / "cache").glob("index*"):
            try:
                if (index / "type").read_text().strip() == "Instruction":
                    continue
                largest = max(largest, _size((index / "size").read_text()))
            except (OSError, ValueError):
                continue
    return largest


def online_cpus() -> set[int]:
    """The CPUs the kernel has online (``/sys/devices/system/cpu/online``, e.g. ``0-3,6``);
    this process's affinity where it does not say."""
    try:
        text = (CACHES / "online").read_text().strip()
    except OSError:
        return set(os.sched_getaffinity(0))
    cpus: set[int] = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


class CacheSweep:
    """A buffer twice the largest cache (``FLOOR_BYTES`` at least), read in full (each
    chunk twice, ``CHUNK_BYTES``) by one thread pinned to each online CPU it may be pinned
    to: each CPU's private caches and the shared last level then hold the buffer's lines, in
    whatever (non-)inclusive arrangement the CPU keeps them. Not just the coordinator's
    affinity: an untrusted process may widen its own within its cpuset, and a CPU outside
    that (where pinning fails) none of the run's processes can reach."""

    def __init__(self, cpus: set[int] | None = None) -> None:
        self.cpus = online_cpus() if cpus is None else cpus
        size = max(2 * largest_cache_bytes(self.cpus), FLOOR_BYTES)
        self._lines = np.ones(size // 8, dtype=np.uint64)  # written once: its own pages

    @property
    def nbytes(self) -> int:
        return self._lines.nbytes

    def release(self) -> None:
        """Free the buffer (a gigabyte at least) now, not when the last reference goes: a
        finished run's objects may wait in reference cycles for the collector, and the
        next run's read set is locked only where enough memory stays available."""
        self._lines = np.empty(0, dtype=np.uint64)

    def sweep(self) -> set[int]:
        """Read the buffer on every CPU, in parallel (numpy's sum lets go of the GIL); the
        CPUs it ran on."""
        swept: set[int] = set()
        threads = [threading.Thread(target=self._read_on, args=(cpu, swept)) for cpu in self.cpus]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return swept

    def _read_on(self, cpu: int, swept: set[int]) -> None:
        try:
            os.sched_setaffinity(0, {cpu})  # this thread only
        except OSError:  # outside this cpuset: no process of the run runs there
            return
        step = CHUNK_BYTES // 8
        for start in range(0, self._lines.size, step):
            chunk = self._lines[start : start + step]
            for _ in range(READS_PER_CHUNK):
                chunk.sum()
        swept.add(cpu)
