"""The CPU's caches as a channel, with and without the coordinator's sweep (issue 33).

On bare processes (``tests/test_cpu_caches.py``, ``told``): a child reads 16 of 32 regions
of a shared library, then the sweep runs (or not), then this process times a copy of each
region; reported, for the two on one core and on two: the mean over ``--trials`` of how
many of the 16 fastest the child had read (chance 8), ``--runs`` times, and the sweep's
best time and size. Run on a quiet machine:
``.venv/bin/python measurements/bench_cpu_caches.py [--json out.json]``.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from test_cpu_caches import CPUS, PLACES, told  # noqa: E402

from benchmark.isolation.cpu_caches import CacheSweep  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    sweep = CacheSweep()
    places = [p for p in PLACES if len(CPUS) > 1 or p == "one core"]
    report: dict = {"machine": f"{platform.machine()}, {len(CPUS)} cpus", "told": {}}
    for name, swept in [("without the sweep", None), ("with the sweep", sweep)]:
        for place in places:
            runs = [told(swept, place, args.trials) for _ in range(args.runs)]
            report["told"][f"{name}, {place}"] = runs
    best = float("inf")
    for _ in range(5):
        began = time.perf_counter()
        sweep.sweep()
        best = min(best, time.perf_counter() - began)
    report |= {"sweep_s": best, "sweep_bytes": sweep.nbytes}
    text = json.dumps(report, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
