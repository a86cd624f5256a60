"""Choose the bench split's per-person contribution cap k on validation, by the oracle's power.

With the person as the privacy unit (issue 32), a cap of k spans per person bounds what one
person contributes. k sets how much real private text exists at all, so it sets what the
instrument can show: the oracle control (the bench's release size of real train texts, at
ε = ∞) must move the downstream model. For every k of the grid this script builds the bench
split with that cap, runs ``public_only`` and ``oracle`` (seed 0, next-token metric only,
the bench's downstream protocol) and reports the oracle's validation gain over public_only.
The smallest k within ``--tolerance`` of the best gain is selected: a tighter bound on each
person at the same power. No test number is read.

Run: ``python measurements/choose_person_cap.py --caps 4,8,16,32 --out person_cap.json``
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from leaderboard.catalog import get_suite
from leaderboard.executors import Job
from leaderboard.selection import DEFAULT_SELECT
from leaderboard.suites import open_store, run_jobs

METHODS = ("public_only", "oracle")


def measure(k: int, root: Path) -> dict[str, float]:
    """Validation top-1 of public_only and the oracle on the bench split capped at k."""
    bench = get_suite("bench")
    suite = dataclasses.replace(
        bench,
        name=f"bench-cap{k}",
        split_options={**bench.split_options, "cap": k},
        metrics=tuple(m for m in bench.metrics if m["name"] == "next_token"),
    )
    store = open_store(suite, root / "results", root / "splits")
    jobs = [
        Job(method, suite.spec(method, suite.budgets(method)[0], 0, store.split_path))
        for method in METHODS
    ]
    found = {
        job.label: float(record["metrics"][DEFAULT_SELECT])
        for job, _, record in run_jobs(store, jobs, runs_root=root / "runs")
    }
    train = json.loads((store.split_path / "manifest.json").read_text())["counts"]["train"]
    return {**found, "train_people": train["clients"], "train_spans": train["samples"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--caps", default="4,8,16,32")
    parser.add_argument("--work", type=Path, default=Path("runs/person_cap"))
    parser.add_argument("--tolerance", type=float, default=0.001, help="top-1 points")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    rows = []
    for k in (int(c) for c in args.caps.split(",")):
        row = {"cap": k, **measure(k, args.work)}
        row["oracle_gain"] = row["oracle"] - row["public_only"]
        rows.append(row)
        print(json.dumps(row), flush=True)
    best = max(r["oracle_gain"] for r in rows)
    chosen = min(r["cap"] for r in rows if r["oracle_gain"] >= best - args.tolerance)
    report = {
        "select": DEFAULT_SELECT,
        "rule": f"smallest cap whose oracle gain is within {args.tolerance} of the best",
        "candidates": rows,
        "selected_cap": chosen,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"selected cap {chosen}")


if __name__ == "__main__":
    main()
