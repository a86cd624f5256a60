"""Hyperparameter selection on validation, the way the papers tune their baselines.

Paper 000 (App. D.2) tunes DP-FedAvg's and DP-FTRL's learning rate over {0.001, 0.01, 0.1}
and the clip over {0.01, 0.1, 1.0}, "selecting the model with the best performance on the
evaluation set"; paper 004 (App. D) tunes the client learning rate, the rounds and the
clip the same way. :func:`tune` runs one suite cell (method, ε, seed) for every point of
such a grid, on the isolated path like any suite run, and selects the point whose record
scores best on a *validation* metric. A metric computed on the test clients is refused:
a leaderboard that selects on test ranks its selection, not its methods.

Candidates are evaluated on the selection metric alone (``next_token``: the validation
top-1 that selects, and the test numbers it always computes, which the report leaves out);
on ``bench`` the full evaluation (FID, audits, the canary audit) is two thirds of a DP-FL
run's time. What is kept: every candidate's run record (signed, in the store's
``_records/``, so a candidate is never run twice), and a signed report in
``<version>/<split>/_tuning/`` with each point's validation score and the selection, never
a test number. ``leaderboard verify`` checks the report against the kept records. The
selected parameters become the suite's ``method_params`` by an edit of
:mod:`leaderboard.suites` that cites the report.

Not accounted: the candidates' runs read the same private clients, so releasing only the
best of them costs more privacy than one run's ε (Papernot & Steinke 2022). The papers do
not charge their tuning either; the report says so, and the leaderboard shows each entry's
ε as the one run's.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from leaderboard.executors import Executor, Job
from leaderboard.signing import sign_entry
from leaderboard.store import write_tuning
from leaderboard.suites import Suite, open_store, run_jobs
from leaderboard.tables import LOWER_IS_BETTER

DEFAULT_SELECT = "next_token.validation_top1"
UNCHARGED_NOTE = (
    "selection over the candidates is not charged to epsilon (as in the papers); each "
    "entry's epsilon is one run's"
)


def check_selectable(metric: str) -> None:
    """Refuse a selection metric that is not measured on the validation clients."""
    if "validation" not in metric.rpartition(".")[2]:
        raise ValueError(
            f"select: {metric!r} is not a validation metric; fedsynth selects on validation, "
            f"never on test (e.g. {DEFAULT_SELECT})"
        )


def selection_metric(suite: Suite, select: str) -> dict[str, Any]:
    """The suite's metric (with its settings) that records ``select``."""
    name = select.partition(".")[0]
    for metric in suite.metrics:
        if metric["name"] == name:
            return metric
    raise ValueError(f"select: suite {suite.name} does not measure {name!r}")


def grid_points(grid: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Every combination of the grid's values, in the grid's order (the first point wins
    a tie)."""
    if not grid or any(not values for values in grid.values()):
        raise ValueError("grid: give at least one value for every parameter")
    names = list(grid)
    return [dict(zip(names, values, strict=True)) for values in itertools.product(*grid.values())]


def best_index(values: Sequence[float], metric: str) -> int:
    """The index of the best value (NaN, e.g. a diverged run, never wins)."""
    sign = -1.0 if metric in LOWER_IS_BETTER else 1.0
    return max(
        range(len(values)),
        key=lambda i: -math.inf if math.isnan(values[i]) else sign * values[i],
    )


def tune(
    suite: Suite,
    method: str,
    grid: Mapping[str, Sequence[Any]],
    *,
    results_root: Path,
    runs_root: Path,
    splits_root: Path,
    epsilon: float | None = None,
    seed: int | None = None,
    select: str = DEFAULT_SELECT,
    executor: Executor | None = None,
    on_run: Callable[[str], None] | None = None,
) -> tuple[dict[str, Any], Path]:
    """Run ``method`` at (``epsilon``, ``seed``) of ``suite`` (default: its first budget and
    seed) for every point of ``grid`` (overriding the suite's method parameters), select on
    ``select``, and write the signed report; returns it and its path."""
    check_selectable(select)
    measured = replace(suite, metrics=(selection_metric(suite, select),))
    if method not in suite.methods:
        raise ValueError(f"method: {method!r} is not in suite {suite.name}")
    epsilon = suite.budgets(method)[0] if epsilon is None else epsilon
    if epsilon not in suite.budgets(method):
        raise ValueError(f"epsilon: {epsilon:g} is not a budget of {method} in {suite.name}")
    seed = suite.seeds_for(epsilon)[0] if seed is None else seed
    points = grid_points(grid)
    store = open_store(suite, results_root, splits_root)
    jobs = [
        Job(str(i), measured.spec(method, epsilon, seed, store.split_path, point))
        for i, point in enumerate(points)
    ]
    found: dict[int, tuple[str, float]] = {}
    for job, run_key, record in run_jobs(store, jobs, runs_root=runs_root, executor=executor):
        if select not in record["metrics"]:
            raise ValueError(f"select: {select!r} is not among the metrics {method} recorded")
        found[int(job.label)] = (run_key, float(record["metrics"][select]))
        if on_run:
            on_run(f"{method} {points[int(job.label)]}")
    values = [found[i][1] for i in range(len(points))]
    report = {
        "suite": suite.name,
        "method": method,
        "epsilon": epsilon if math.isfinite(epsilon) else "inf",
        "seed": seed,
        "leaderboard_version": store.lb_version,
        "split": store.split_name,
        "select": select,
        "lower_is_better": select in LOWER_IS_BETTER,
        "grid": {name: list(values) for name, values in grid.items()},
        "candidates": [
            {"params": point, "run_key": found[i][0], "value": values[i]}
            for i, point in enumerate(points)
        ],
        "selected": points[best_index(values, select)],
        "accounting": UNCHARGED_NOTE,
    }
    signed = sign_entry(report, store.key)
    return signed, write_tuning(results_root, store.lb_version, store.split_name, signed)


def check_report(report: Mapping[str, Any], records: Mapping[str, Mapping[str, Any]]) -> None:
    """A report must select on validation, cite kept records of its method run at each
    candidate's parameters, copy their values, and select their best (``ValueError`` names
    the first mismatch)."""
    select = report["select"]
    check_selectable(select)
    values = []
    for candidate in report["candidates"]:
        record = records.get(candidate["run_key"])
        if record is None:
            raise ValueError(f"candidate {candidate['params']}: its run record is not kept")
        config = record["method"]["config"]
        ran = record["method"]["name"] == report["method"] and all(
            config.get(name) == value for name, value in candidate["params"].items()
        )
        if not ran:
            raise ValueError(f"candidate {candidate['params']}: its record ran something else")
        if record["metrics"].get(select) != candidate["value"]:
            raise ValueError(f"candidate {candidate['params']}: value is not its record's")
        values.append(candidate["value"])
    if report["candidates"][best_index(values, select)]["params"] != report["selected"]:
        raise ValueError("selected is not the candidate with the best validation value")
