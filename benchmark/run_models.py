"""Which profile roles, and which hub models, a run or a grid of runs needs: the union of
what its method declares (:attr:`benchmark.method.Method.models`) and what its metrics
load for that method's kind of release (:meth:`benchmark.evaluation.base.Metric.models_for`).

``fedsynth models fetch`` downloads a grid's models from this, and a suite's ``--plan``
lists them per run. Only registered methods are read here (a submitted adapter's
declaration is read in its sandbox, by the coordinator, when it runs).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from benchmark.profiles.base import ModelProfile
from benchmark.profiles.hub_fetch import HubModel
from benchmark.profiles.roles import check_roles
from benchmark.registry import METHODS


def run_roles(method: str, metrics: Sequence[dict[str, Any]]) -> tuple[str, ...]:
    """The roles a run of ``method`` evaluated with ``metrics`` loads, in role order."""
    from benchmark.evaluation.base import evaluation_models

    method_cls = METHODS.get(method)
    evaluated = evaluation_models(list(metrics), method_cls.artifact_kind)
    return check_roles((*method_cls.models, *evaluated), f"{method}.models")


def grid_hub_models(
    profile: ModelProfile, runs: Iterable[tuple[str, Sequence[dict[str, Any]]]]
) -> list[HubModel]:
    """The hub snapshots of every (method, metrics) run of a grid, each listed once."""
    roles = {role for method, metrics in runs for role in run_roles(method, metrics)}
    return profile.hub_models(roles)
