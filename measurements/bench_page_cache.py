"""What keeping a method process's read set resident costs (issue 33, the page cache).

Measured, for the read set a method process gets here (``coordinator.policy_for``):

- ``files`` and ``bytes``: what :func:`benchmark.isolation.page_cache.keep_resident` walks;
- ``resident_pass_s``: a pass that finds everything resident (best of ``--repeats``): what
  each pool call on the public schedule adds inside its slot;
- ``forget_then_pass_s`` (as root): the kernel's unused directory entries and inodes
  dropped (:func:`~benchmark.isolation.page_cache.forget_lookups`), then a pass: what each
  pool call on the schedule adds where the coordinator can drop them (best of
  ``--repeats``), and ``dentries_before_drop`` (``/proc/sys/fs/dentry-state``);
- ``pin_pass_s``, ``pinned_pass_s``, ``release_s``: the first pass that locks every file
  (:class:`~benchmark.isolation.page_cache.Pins`: once per scheduled run), a pass with them
  locked, and unlocking them (the run's end); ``locked_bytes`` (``Mlocked`` in
  ``/proc/meminfo``, host-wide) while locked;
- ``settle_s`` (as root): what each pool call on the schedule adds inside its slot once the
  set is locked: the drop of every page nothing maps with the entries
  (``forget_lookups(directory_blocks=True)``), the pass that reads the read set's
  directories back, and the sweep of the CPU's caches
  (:class:`~benchmark.isolation.cpu_caches.CacheSweep`: ``sweep_s``, ``sweep_bytes``);
- ``from_cold_s`` (with ``--cold``): the pass after every file of the read set was dropped
  from the page cache (``POSIX_FADV_DONTNEED``; pages other processes map stay): what the
  first scheduled run on a host pays. It slows the host's other work meanwhile.

Run: ``.venv/bin/python measurements/bench_page_cache.py [--cold] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

from benchmark.isolation.coordinator import harness_code, policy_for
from benchmark.isolation.cpu_caches import CacheSweep
from benchmark.isolation.page_cache import (
    Pins,
    forget_lookups,
    keep_resident,
    meminfo_bytes,
    regular_files,
)

DENTRIES = Path("/proc/sys/fs/dentry-state")


def _drop(files: list[str]) -> None:
    for path in files:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cold", action="store_true", help="Also time a pass from cold.")
    parser.add_argument("--json", type=Path, help="Also write the numbers to this file.")
    args = parser.parse_args()

    roots = policy_for(harness_code(), []).read_only
    report: dict[str, object] = {
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cpus",
        "kernel": platform.release(),
    }
    if args.cold:
        _drop(list(regular_files(roots)))
        started = time.perf_counter()
        found = keep_resident(roots)
        report |= {"from_cold_s": time.perf_counter() - started}
        report |= {"read_back_bytes": found.read_back_bytes}
    best = float("inf")
    for _ in range(args.repeats):
        started = time.perf_counter()
        found = keep_resident(roots)
        best = min(best, time.perf_counter() - started)
    report |= {"files": found.files, "bytes": found.total_bytes, "resident_pass_s": best}
    report |= {"dentries_before_drop": int(DENTRIES.read_text().split()[0])}
    best = float("inf")
    for _ in range(args.repeats):
        started = time.perf_counter()
        if not forget_lookups():
            break
        keep_resident(roots)
        best = min(best, time.perf_counter() - started)
    else:
        report |= {"forget_then_pass_s": best}
    pins = Pins()
    started = time.perf_counter()
    keep_resident(roots, pins=pins)
    report |= {"pin_pass_s": time.perf_counter() - started, "pins_refused": pins.refused}
    report |= {"locked_bytes": meminfo_bytes("Mlocked")}
    best = float("inf")
    for _ in range(args.repeats):
        started = time.perf_counter()
        keep_resident(roots, pins=pins)
        best = min(best, time.perf_counter() - started)
    report |= {"pinned_pass_s": best}
    sweep = CacheSweep()
    best_settle = best_sweep = float("inf")
    for _ in range(args.repeats):
        started = time.perf_counter()
        if not forget_lookups(directory_blocks=True):
            break
        keep_resident(roots, pins=pins)
        swept = time.perf_counter()
        sweep.sweep()
        best_sweep = min(best_sweep, time.perf_counter() - swept)
        best_settle = min(best_settle, time.perf_counter() - started)
    else:
        report |= {"settle_s": best_settle, "sweep_s": best_sweep, "sweep_bytes": sweep.nbytes}
    started = time.perf_counter()
    pins.release()
    report |= {"release_s": time.perf_counter() - started}
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
