"""Choose the bench's one downstream recipe (lr × epochs) on validation, with the oracle.

Every text release is scored by fine-tuning the on-device LM on it with one recipe, and the
ε = ∞ bound trains the private texts with the same recipe (issue 32 item 6). The recipe
sets how much the instrument can see of a release, so it is chosen where the real signal is
known to be: the oracle control (the bench's release size of real private train texts). For
every lr of the grid the script runs the oracle once with ``--epochs`` epochs; the
evaluator scores validation after each epoch (``validation_history``), so one run gives
every (lr, epoch) candidate. The rule, declared before the runs: the candidate with the
highest mean validation top-1 over the seeds, and its epoch must be interior (below
``--epochs``) so the optimum is not outside the grid; otherwise the script says so and
selects nothing. Epoch 0 (the untrained start) is never a candidate. No test number is read.

Run: ``python measurements/choose_downstream_recipe.py --out recipe.json``
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import numpy as np

from leaderboard.catalog import get_suite
from leaderboard.executors import Job
from leaderboard.suites import open_store, run_jobs

SELECT_ON = "top1"


def oracle_histories(lr: float, epochs: int, seeds: list[int], root: Path) -> list[list[float]]:
    """Validation top-1 after each epoch of the oracle trained at ``lr``, one list per seed."""
    bench = get_suite("bench")
    suite = dataclasses.replace(  # the bench's name: every lr shares its one split build
        bench,
        downstream={**bench.downstream, "lr": lr, "epochs": epochs},
        metrics=tuple(m for m in bench.metrics if m["name"] == "next_token"),
    )
    store = open_store(suite, root / "results", root / "splits")
    budget = suite.budgets("oracle")[0]
    jobs = [Job(f"seed{s}", suite.spec("oracle", budget, s, store.split_path)) for s in seeds]
    found = {
        job.label: [e[SELECT_ON] for e in record["evaluation"]["downstream"]["validation_history"]]
        for job, _, record in run_jobs(store, jobs, runs_root=root / "runs")
    }
    return [found[f"seed{s}"] for s in seeds]


def select(candidates: list[dict], epochs: int) -> dict:
    """The best candidate by mean validation top-1 (ties: the earlier epoch, then the lower
    lr), whether its epoch is interior (the rule) and whether its lr sits at the grid's edge
    (reported, so a reader sees it)."""
    best = max(candidates, key=lambda c: (c["validation_top1"], -c["epoch"], -c["lr"]))
    lrs = sorted({c["lr"] for c in candidates})
    edge_lr = len(lrs) > 1 and best["lr"] in (lrs[0], lrs[-1])
    return {**best, "interior": best["epoch"] < epochs, "lr_at_grid_edge": edge_lr}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lrs", default="5e-5,1e-4,2e-4,5e-4,1e-3")
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--work", type=Path, default=Path("runs/downstream_recipe"))
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    candidates = []
    for lr in (float(v) for v in args.lrs.split(",")):
        histories = np.array(oracle_histories(lr, args.epochs, seeds, args.work))
        for epoch, scores in enumerate(histories.T, start=1):
            row = {"lr": lr, "epoch": epoch, "validation_top1": float(scores.mean())}
            candidates.append({**row, "per_seed": [float(s) for s in scores]})
        print(json.dumps(candidates[-args.epochs :]), flush=True)
    chosen = select(candidates, args.epochs)
    report = {
        "select": f"next_token.validation_{SELECT_ON} of the oracle, mean over seeds {seeds}",
        "rule": "highest validation top-1; its epoch must be below the largest tried",
        "epochs_tried": args.epochs,
        "candidates": candidates,
        "selected": chosen if chosen["interior"] else None,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    verdict = "selected" if chosen["interior"] else "NOT interior (extend the grid):"
    print(verdict, f"lr {chosen['lr']:g}, {chosen['epoch']} epochs")


if __name__ == "__main__":
    main()
