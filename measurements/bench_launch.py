"""What forking untrusted children from the launch template saves (isolation/template.py).

Runs the same isolated tiny-suite cells twice in fresh split/run directories: once with
every child (method process, client worker, zygote) forked from the template, once with
each started as a fresh interpreter (the template disabled), and reports the wall time of
each and their ratio. Both orders are run (``--repeats`` pairs, alternating) so that a
warmer page cache does not favour one side.

Run: ``.venv/bin/python measurements/bench_launch.py [--methods public_only,dp_fedavg,popri]
[--repeats 1] [--json out.json]`` on a quiet machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import tempfile
import time
from pathlib import Path

from benchmark.isolation import template
from leaderboard.catalog import SUITES
from leaderboard.suites import run_suite


def _suite_seconds(methods: list[str], forked: bool) -> float:
    suite = dataclasses.replace(SUITES["tiny"], methods=methods)
    chosen = template._template_for
    if not forked:
        template._template_for = lambda base: None
    try:
        with tempfile.TemporaryDirectory() as root:
            began = time.perf_counter()
            run_suite(
                suite,
                results_root=Path(root, "results"),
                runs_root=Path(root, "runs"),
                splits_root=Path(root, "splits"),
            )
            return time.perf_counter() - began
    finally:
        template._template_for = chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", default="public_only,dp_fedavg,popri")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    methods = args.methods.split(",")
    seconds: dict[str, list[float]] = {"forked": [], "fresh": []}
    for repeat in range(args.repeats):
        order = ("fresh", "forked") if repeat % 2 == 0 else ("forked", "fresh")
        for side in order:
            seconds[side].append(_suite_seconds(methods, side == "forked"))
    report = {
        "methods": methods,
        "seconds": seconds,
        "fresh_over_forked": min(seconds["fresh"]) / min(seconds["forked"]),
        "cpus": os.cpu_count(),
        "machine": platform.processor() or platform.machine(),
    }
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
