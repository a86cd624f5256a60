"""The CPU's caches as a channel between two processes that share memory, and the sweep the
coordinator runs between client code's turn and the method process's
(:mod:`benchmark.isolation.cpu_caches`), shown on bare processes, on one core and across
two: on a quiet machine here the harness's own work between a call's end and the method
process's next step already disturbed the caches (``tests/test_channels.py``,
``adv_cpu_caches``); a CI host's did not."""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from adversaries import (
    REGION,
    _regions,
    evict_own_lines,
    fastest_half,
    mapped_for_timing,
    touch_regions,
)

from benchmark.isolation.cpu_caches import FLOOR_BYTES, CacheSweep, largest_cache_bytes, online_cpus

LIBRARY = Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"  # every process maps it


CPUS = sorted(os.sched_getaffinity(0))
PLACES = {"one core": (CPUS[0], CPUS[0]), "two cores": (CPUS[0], CPUS[-1])}


def told(sweep: CacheSweep | None, place: str, trials: int = 6) -> float:
    """A forked child reads half of 32 regions of a shared library (its pages are the page
    cache's, shared); then ``sweep`` runs, if any; then this process times a copy of each
    region. The two run on one CPU or on two (``place``), as a client worker and a method
    process may: a core's own caches, or the shared last level and the other core's. Mean,
    over ``trials``, of how many of the 16 fastest the child read (chance: 8)."""
    client_cpu, timing_cpu = PLACES[place]
    start = LIBRARY.stat().st_size // 2 // 4096 * 4096
    offsets = [start + i * REGION for i in range(32)]
    ask, answer = os.pipe(), os.pipe()
    child = os.fork()
    if child == 0:  # the client side
        os.sched_setaffinity(0, {client_cpu})
        os.close(ask[1])
        regions = _regions(str(LIBRARY), offsets)
        while chosen := os.read(ask[0], 8):
            mask = int.from_bytes(chosen, "little")
            touch_regions([r for i, r in enumerate(regions) if mask >> i & 1])
            os.write(answer[1], b".")
        os._exit(0)
    os.close(ask[0])
    mine = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {timing_cpu})
    regions = dict(enumerate(mapped_for_timing(str(LIBRARY), offsets)))
    hits = []
    try:
        for _ in range(trials):
            evict_own_lines()
            chosen = random.sample(range(32), 16)
            os.write(ask[1], sum(1 << i for i in chosen).to_bytes(8, "little"))
            os.read(answer[0], 1)
            if sweep is not None:
                sweep.sweep()
            hits.append(len(set(fastest_half(regions)) & set(chosen)))
    finally:
        os.close(ask[1])
        os.waitpid(child, 0)
        os.sched_setaffinity(0, mine)
    return float(np.mean(hits))


on_two_cores = pytest.mark.skipif(len(CPUS) < 2, reason="one CPU to run on")
PLACE = pytest.mark.parametrize(
    "place", ["one core", pytest.param("two cores", marks=on_two_cores)]
)


@PLACE
def test_the_sweep_leaves_no_line_of_client_code_to_time(place):
    assert told(CacheSweep(), place) <= 11


@pytest.mark.slow  # the channel, shown open: load beside it disturbs the caches too
@PLACE
def test_without_the_sweep_the_lines_client_code_read_are_the_fast_ones(place):
    assert told(None, place, trials=10) >= 10  # chance 8 +- 0.45


def test_the_sweep_covers_the_largest_cache_twice_on_every_cpu_a_process_may_use():
    """Not only the coordinator's affinity: an untrusted process may widen its own."""
    sweep = CacheSweep()
    assert sweep.cpus == online_cpus() >= set(os.sched_getaffinity(0))
    assert sweep.nbytes >= max(2 * largest_cache_bytes(sweep.cpus), FLOOR_BYTES)
    assert sweep.sweep() >= set(os.sched_getaffinity(0))


def test_online_cpus_are_read_as_the_kernel_lists_them(tmp_path, monkeypatch):
    from benchmark.isolation import cpu_caches

    (tmp_path / "online").write_text("0-3,6,8-9\n")
    monkeypatch.setattr(cpu_caches, "CACHES", tmp_path)
    assert online_cpus() == {0, 1, 2, 3, 6, 8, 9}


def test_cache_sizes_are_read_as_the_kernel_writes_them(tmp_path, monkeypatch):
    from benchmark.isolation import cpu_caches

    for index, (kind, size) in enumerate(
        [("Data", "48K"), ("Instruction", "64M"), ("Unified", "2048K")]
    ):
        folder = tmp_path / "cpu3" / "cache" / f"index{index}"
        folder.mkdir(parents=True)
        (folder / "type").write_text(f"{kind}\n")
        (folder / "size").write_text(f"{size}\n")
    monkeypatch.setattr(cpu_caches, "CACHES", tmp_path)
    assert largest_cache_bytes({3}) == 2048 << 10  # an instruction cache is not swept
    assert largest_cache_bytes({4}) == 0
