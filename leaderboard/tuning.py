"""Hyperparameter selection on validation, the way the papers tune their baselines.

Paper 000 (App. D.2) tunes DP-FedAvg's and DP-FTRL's learning rate over {0.001, 0.01, 0.1}
and the clip over {0.01, 0.1, 1.0}, "selecting the model with the best performance on the
evaluation set"; paper 004 (App. D) tunes the client learning rate, the rounds and the
clip the same way. :func:`tune` runs one suite cell (method, ε, seed) for every point of
such a grid, on the isolated path like any suite run, and selects the point whose record
scores best on a *validation* metric. A metric computed on the test clients is refused:
a leaderboard that selects on test ranks its selection, not its methods.

Candidates are evaluated on the selection metric (``next_token``: the validation top-1
that selects, and the test numbers it always computes, which the report leaves out) plus
the metrics that change training (the canary audit's canaries are privacy units), not on
FID and the MIA/DCR audits: on ``bench`` the full evaluation is two thirds of a DP-FL
run's time. What is kept: every candidate's run record (signed, in the store's
``_records/``, so a tuning resumes on another machine without repeating a run), and a
signed report in ``<version>/<split>/_tuning/`` with each point's validation score and the
selection, never a test number (:mod:`leaderboard.selection`, which ``leaderboard verify``
uses to check the report against the kept records). The report names the suite file, version
and digest it was made under (``suite_definition``); the selected parameters become that
file's ``selected_params`` for the method and ε, with its version bumped (a test holds them
equal to the report's selection).
The seed may be any (a seed outside the suite's keeps the tuning's noise draws apart from
the reported runs'; the default is the suite's first). The published run at the tuning's
seed never forks the candidates' rounds (their metrics differ, and the rounds key names
them: :func:`benchmark.shared_rounds.rounds_key`), so it does not reproduce the release
that won on validation.

Not accounted: the candidates' runs read the same private clients, so releasing only the
best of them costs more privacy than one run's ε (Papernot & Steinke 2022). The papers do
not charge their tuning either; the report says so, and the leaderboard shows each entry's
ε as the one run's. The exception is a grid of the method's post-processing keys (an LLM
method's release sampling): its first candidate runs the private rounds alone, and the
others post-process those same rounds (:mod:`benchmark.shared_rounds`), so selecting among
them costs nothing beyond that one run's ε; the report says which holds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchmark.records import json_epsilon
from benchmark.registry import METHODS
from benchmark.shared_rounds import TRAINING_METRICS
from leaderboard.executors import Executor, Job
from leaderboard.selection import (
    DEFAULT_SELECT,
    accounting_of,
    best_index,
    check_selectable,
    grid_points,
)
from leaderboard.signing import sign_entry
from leaderboard.store import write_tuning
from leaderboard.store_index import update_index
from leaderboard.suites import Suite, check_refusals, open_store, run_jobs


def measured_suite(suite: Suite, select: str) -> Suite:
    """``suite`` with only the metric that records ``select`` (with its settings) and the
    metrics that change training."""
    name = select.partition(".")[0]
    kept = tuple(m for m in suite.metrics if m["name"] in (name, *TRAINING_METRICS))
    if all(m["name"] != name for m in kept):
        raise ValueError(f"select: suite {suite.name} does not measure {name!r}")
    return replace(suite, metrics=kept)


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
    lower_is_better = check_selectable(select)
    measured = measured_suite(suite, select)
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
    records: dict[int, dict[str, Any]] = {}
    # a grid of post-processing keys: the first candidate's rounds, then the others' forks
    stem_first = set(grid) <= set(METHODS.get(suite.method_of(method)).post_processing)
    for batch in [jobs[:1], jobs[1:]] if stem_first else [jobs]:
        for job, _, record in run_jobs(store, batch, runs_root=runs_root, executor=executor):
            if select not in record["metrics"]:
                raise ValueError(f"select: {select!r} is not among the metrics {method} recorded")
            records[int(job.label)] = record
            if on_run:
                on_run(f"{method} {points[int(job.label)]}")
        check_refusals(store)  # a refused first candidate stops the grid
    kept = [records[i] for i in range(len(points))]
    values = [float(r["metrics"][select]) for r in kept]
    report = {
        "suite": suite.name,
        "suite_definition": suite.definition.to_dict() if suite.definition else None,
        "method": method,
        "epsilon": json_epsilon(epsilon),
        "seed": seed,
        "leaderboard_version": store.lb_version,
        "split": store.split_name,
        "select": select,
        "lower_is_better": lower_is_better,
        "grid": {name: list(values) for name, values in grid.items()},
        "candidates": [
            {"params": point, "run_key": kept[i]["run_key"], "value": values[i]}
            for i, point in enumerate(points)
        ],
        "selected": points[best_index(values, lower_is_better)],
        "accounting": accounting_of(kept),
    }
    signed = sign_entry(report, store.key)
    path = write_tuning(results_root, signed)
    update_index(results_root, store.key, store.keys, written=[path])
    return signed, path
