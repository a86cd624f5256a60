"""How many seeds the preference track needs for a 95 % CI half-width of at most 5 points.

A table cell is the mean over seeds with a Student-t interval (``benchmark.evaluation.stats.
summarize``): half-width t(n−1) · s / √n, s the seed-to-seed standard deviation. Each seed
redraws the method's randomness, its DP noise and the win rate's test prompts (100 of the
test speakers), so s counts those sources. This reads s per ranked cell (every method row,
not the ε = 0 control whose reward accuracy is 0.5 by construction) from a track's entries
and prints, per metric, the smallest n whose half-width is ≤ ``--target`` for the pooled s
(the cells' variances averaged: the planning figure) and for the largest cell's s.

Not counted by a t-interval over seeds: the finite test set itself, the same tuples in
every seed (reward accuracy scores all of them), which moves every row alike.

Run: ``.venv/bin/python measurements/prefs_seed_count.py
[results/lb-2fe8eda87e/chitchat_prefs-v-90568ce4db36]``.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from scipy import stats

METRICS = ("win_rate.win_rate", "reward_accuracy.accuracy")
CONTROLS = ("base_model",)


def half_width(std: float, n: int, confidence: float = 0.95) -> float:
    """The t-interval half-width of a mean over ``n`` seeds with seed std ``std``."""
    return float(stats.t.ppf((1 + confidence) / 2, df=n - 1)) * std / math.sqrt(n)


def seeds_needed(std: float, target: float, most: int = 200) -> int | None:
    """The smallest n ≥ 2 with a half-width ≤ ``target`` (None beyond ``most``)."""
    return next((n for n in range(2, most + 1) if half_width(std, n) <= target), None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "entries", type=Path, nargs="?",
        default=Path("results/lb-2fe8eda87e/chitchat_prefs-v-90568ce4db36"),
    )  # fmt: skip
    parser.add_argument("--target", type=float, default=0.05)
    args = parser.parse_args()
    entries = [json.loads(p.read_text()) for p in sorted(args.entries.glob("*.json"))]
    report = {}
    for metric in METRICS:
        cells = {
            f"{e['method']['name']} ε={e['privacy']['epsilon_budget']}": e["metrics"][metric]
            for e in entries
            if e["method"]["name"] not in CONTROLS and metric in e["metrics"]
        }
        stds = {cell: s["std"] for cell, s in cells.items() if s.get("std") is not None}
        pooled = math.sqrt(sum(s * s for s in stds.values()) / len(stds))
        worst = max(stds, key=stds.get)
        report[metric] = {
            "cells": len(stds),
            "seeds_now": sorted({s["n"] for s in cells.values()}),
            "pooled_std": pooled,
            "seeds_for_pooled_std": seeds_needed(pooled, args.target),
            "largest_std": {"cell": worst, "std": stds[worst]},
            "seeds_for_largest_std": seeds_needed(stds[worst], args.target),
        }
    print(json.dumps({"target_half_width": args.target, "metrics": report}, indent=2))


if __name__ == "__main__":
    main()
