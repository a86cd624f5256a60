"""Choose the cpu profile's generator (SmolLM2-135M-Instruct or Gemma 3 270M) on validation,
with the generator-only control (issue 32 item 2).

``generator_only`` releases what the generator writes from the LLM methods' public seeds and
prompts, with no private signal, at the bench's release size; the instrument (the on-device
LM, its public start and the downstream recipe) is the same for both profiles. So the
difference between the two runs is the generator's alone. The rule, declared before the
runs: the profile whose release gives the higher mean validation top-1 over the seeds. Each
candidate is evaluated as a tuning candidate is (:func:`leaderboard.tuning.measured_suite`:
the selection metric plus the metrics that change training), and no test number is read or
written. The report is signed with the host key, like a tuning report.

Run: ``python measurements/choose_generator.py --out docs/measurements/generator_choice.json``
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import numpy as np

from leaderboard.catalog import get_suite
from leaderboard.executors import Job
from leaderboard.selection import DEFAULT_SELECT
from leaderboard.signing import host_key, sign_entry
from leaderboard.suites import open_store, run_jobs
from leaderboard.tuning import measured_suite

PROFILES = ("cpu", "cpu-gemma")


def validation_scores(profile: str, seeds: list[int], root: Path) -> tuple[list[float], str]:
    """``generator_only``'s validation top-1 on the bench under ``profile``, one per seed,
    and the generator's label as the records state it."""
    suite = dataclasses.replace(measured_suite(get_suite("bench"), DEFAULT_SELECT), profile=profile)
    store = open_store(suite, root / "results", root / "splits")
    budget = suite.budgets("generator_only")[0]
    jobs = [
        Job(f"seed{s}", suite.spec("generator_only", budget, s, store.split_path)) for s in seeds
    ]
    found, labels = {}, set()
    for job, _, record in run_jobs(store, jobs, runs_root=root / "runs"):
        found[job.label] = float(record["metrics"][DEFAULT_SELECT])
        labels.add(record["models"]["generator"])
    return [found[f"seed{s}"] for s in seeds], " / ".join(sorted(labels))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--work", type=Path, default=Path("runs/generator_choice"))
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    candidates = []
    for profile in PROFILES:
        scores, label = validation_scores(profile, seeds, args.work)
        candidates.append(
            {"profile": profile, "generator": label, "per_seed": scores,
             "value": float(np.mean(scores))}
        )  # fmt: skip
        print(json.dumps(candidates[-1]), flush=True)
    best = max(candidates, key=lambda c: c["value"])
    report = {
        "suite": "bench",
        "method": "generator_only",
        "select": f"{DEFAULT_SELECT}, mean over seeds {seeds}",
        "rule": "the profile whose generator_only release scores the higher validation top-1",
        "candidates": candidates,
        "selected": best["profile"],
    }
    signed = sign_entry(report, host_key(args.work / "results"))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(signed, indent=1) + "\n")
    print("selected", best["profile"], best["generator"])


if __name__ == "__main__":
    main()
