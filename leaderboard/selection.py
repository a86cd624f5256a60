"""What a hyperparameter selection may use and how its report is checked (no runs here:
:mod:`leaderboard.tuning` runs the candidates, ``leaderboard verify`` checks the reports).

Only metrics measured on the split's *validation* clients may select, each with its
direction; a test metric is refused by name, not by a substring of it.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from leaderboard.directions import lower_is_better

# The validation metrics that may select. The downstream protocol's validation accuracy is
# what the papers select their baselines on (paper 000 App. D.2, paper 004 App. D).
DEFAULT_SELECT = "next_token.validation_top1"
SELECTABLE = (DEFAULT_SELECT,)


def check_selectable(metric: str) -> bool:
    """Whether lower is better for ``metric``; ``ValueError`` for a metric that may not
    select (anything not measured on the validation clients)."""
    if metric not in SELECTABLE:
        raise ValueError(
            f"select: {metric!r} is not a validation metric; fedsynth selects on validation, "
            f"never on test (selectable: {', '.join(SELECTABLE)})"
        )
    return lower_is_better(metric)


def grid_points(grid: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Every combination of the grid's values, in the grid's order (the first point wins a
    tie); a parameter without values or a repeated value is refused."""
    if not grid or any(not values for values in grid.values()):
        raise ValueError("grid: give at least one value for every parameter")
    for name, values in grid.items():
        if len({json.dumps(v, sort_keys=True) for v in values}) != len(values):
            raise ValueError(f"grid: {name} lists a value twice")
    names = list(grid)
    return [dict(zip(names, values, strict=True)) for values in itertools.product(*grid.values())]


def grid_digest(grid: Mapping[str, Sequence[Any]], select: str) -> str:
    """A short digest of what a selection compared: two selections of one cell over other
    grids (or by another metric) keep two reports."""
    body = json.dumps({"grid": grid, "select": select}, sort_keys=True)
    return hashlib.sha256(body.encode()).hexdigest()[:10]


def best_index(values: Sequence[float], lower_is_better: bool) -> int:
    """The index of the best value; NaN (e.g. a diverged run) never wins, the first of
    equal values does; ``ValueError`` when no value is a number."""
    if all(math.isnan(v) for v in values):
        raise ValueError("select: no candidate has a validation score")
    sign = -1.0 if lower_is_better else 1.0
    ranked = [(not math.isnan(v), sign * v if not math.isnan(v) else 0.0) for v in values]
    return max(range(len(values)), key=ranked.__getitem__)


def accounting_of(records: Sequence[dict[str, Any]]) -> str:
    """What a selection over ``records`` costs: nothing beyond one run's ε when every one
    was made from the same rounds (their ``rounds``: :mod:`benchmark.shared_rounds`) and
    released nothing else (the same ledger), else the uncharged note."""
    made_from = {
        json.dumps([r.get("rounds"), r["privacy"]["ledger"]], sort_keys=True) for r in records
    }  # the same rounds, and no release beyond them
    shared = len(made_from) == 1 and all(r.get("rounds") for r in records)
    return SHARED_NOTE if shared else UNCHARGED_NOTE


UNCHARGED_NOTE = (
    "selection over the candidates is not charged to epsilon (as in the papers); each "
    "entry's epsilon is one run's"
)
SHARED_NOTE = (
    "every candidate post-processes the same run's private rounds (rounds), so "
    "selection over them costs no privacy beyond that run's epsilon"
)


def _same(a: Any, b: Any) -> bool:
    nan = isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)
    return a == b or nan


def check_report(report: Mapping[str, Any], records: Mapping[str, Mapping[str, Any]]) -> None:
    """``ValueError`` naming the first way ``report`` is not an honest selection over
    ``records`` (the kept run records of its version and split, by run key): it must
    select on a validation metric in its direction, list exactly its grid's points, each
    a distinct kept run of its method at its ε, seed and parameters whose value it
    copies, and select their best."""
    select = report["select"]
    if report["lower_is_better"] != check_selectable(select):
        raise ValueError(f"lower_is_better is not {select}'s direction")
    candidates = report["candidates"]
    if [c["params"] for c in candidates] != grid_points(report["grid"]):
        raise ValueError("the candidates are not exactly the grid's points")
    if len({c["run_key"] for c in candidates}) != len(candidates):
        raise ValueError("two candidates cite one run")
    for candidate in candidates:
        record = records.get(candidate["run_key"])
        if record is None:
            raise ValueError(f"candidate {candidate['params']}: its run record is not kept")
        config, spec = record["method"]["config"], record["spec"]
        ran = (
            record["method"]["name"] == report["method"]
            and _same(record["privacy"]["epsilon_budget"], report["epsilon"])
            and spec["seed"] == report["seed"]
            and all(config.get(name) == value for name, value in candidate["params"].items())
        )
        if not ran:
            raise ValueError(f"candidate {candidate['params']}: its record ran something else")
        if not _same(record["metrics"].get(select), candidate["value"]):
            raise ValueError(f"candidate {candidate['params']}: value is not its record's")
    if report.get("accounting") != accounting_of([records[c["run_key"]] for c in candidates]):
        raise ValueError("accounting is not what the candidates' records show")
    values = [float(c["value"]) for c in candidates]
    if candidates[best_index(values, report["lower_is_better"])]["params"] != report["selected"]:
        raise ValueError("selected is not the candidate with the best validation value")
