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
from benchmark.profiles.hub_fetch import HubModel, merged
from benchmark.profiles.roles import check_roles
from benchmark.registry import METHODS


def run_roles(method: str, metrics: Sequence[dict[str, Any]]) -> tuple[str, ...]:
    """The roles a run of ``method`` evaluated with ``metrics`` loads, in role order."""
    from benchmark.evaluation.base import evaluation_models

    method_cls = METHODS.get(method)
    evaluated = evaluation_models(list(metrics), method_cls.artifact_kind)
    return check_roles((*method_cls.models, *evaluated), f"{method}.models")


def run_hub_models(
    profile: ModelProfile, method: str, metrics: Sequence[dict[str, Any]], params: dict[str, Any]
) -> list[HubModel]:
    """The hub snapshots one run loads: its roles' on ``profile``, and those its method
    loads by id under its resolved config (``params`` over the profile's defaults)."""
    method_cls = METHODS.get(method)
    config = method_cls.resolve_config(profile.name, params)
    by_id = [HubModel(i, "main", (method,)) for i in method_cls.hub_ids(config)]
    return merged([*profile.hub_models(run_roles(method, metrics)), *by_id])


def grid_hub_models(
    profile: ModelProfile, runs: Iterable[tuple[str, Sequence[dict[str, Any]], dict[str, Any]]]
) -> list[HubModel]:
    """The hub snapshots of every (method, metrics, params) run of a grid, each once."""
    return merged(m for run in runs for m in run_hub_models(profile, *run))
