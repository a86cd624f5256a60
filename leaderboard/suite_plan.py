"""A suite's dry run (``fedsynth suite run SUITE --plan``): its runs, the models each
loads and whether they are in the local hub cache, and the hours the known rates give.

Rates are cited, never guessed: :data:`RATES` holds per-round GPU seconds a paper
measured, by (profile, method), with the setting they were measured on. A part of a run
with no rate (the release's final generation, the evaluation's fine-tuning, a method no
paper timed) is printed as ``unknown``, and so is the client part while the split (its
number of clients) is not built. A rate is applied per round as cited, whatever the run's
own sizes (Table 2's PE generated 1,800 samples a round, paper 000's PrE-Text grid 1,024);
only the client part scales, linearly, with the clients per round.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmark.evaluation.judges import judge_loads
from benchmark.profiles.base import ModelProfile
from benchmark.profiles.hub_fetch import HubModel
from leaderboard.suites import Suite

PAPER000_TABLE2 = (
    "paper 000 (POPri) Table 2: bioRxiv, 1,000 clients sampled per round, GPU seconds "
    "(the GPU model is not stated)"
)


@dataclass(frozen=True)
class Rate:
    """Seconds of one method round: the server's, and one participating client's."""

    server_seconds: float
    client_seconds: float
    source: str


# By (profile, method). Paper 000 leaves FedAvg's server time blank as negligible (0 here).
RATES: dict[tuple[str, str], Rate] = {
    ("paper", "popri"): Rate(13_547.84, 0.01, PAPER000_TABLE2),
    ("paper", "pre_text"): Rate(326.25, 0.0027, PAPER000_TABLE2),
    ("paper", "dp_fedavg"): Rate(0.0, 4.8, PAPER000_TABLE2),
}
ROUNDS_KEYS = ("rounds", "iterations")
COHORT_KEYS = ("clients_per_round", "cohort_size")


@dataclass(frozen=True)
class RunPlan:
    label: str
    roles: tuple[str, ...]
    models: list[HubModel]  # the hub snapshots of its roles and those its method loads by id
    rounds_hours: float | None  # None: no rate, or the client part needs the client count
    server_hours: float | None  # the server part alone (known without the client count)
    rate: Rate | None


def train_clients(suite: Suite, splits_root: Path) -> int | None:
    """Train clients of the suite's split if it is built under ``splits_root``, else None."""
    from benchmark.split_storage import is_complete, read_clients

    path = splits_root / f"{suite.source}-{suite.name}"
    return len(read_clients(path)["clients"]["train"]) if is_complete(path) else None


def clients_per_round(config: dict[str, Any], clients: int | None) -> float | None:
    """A round's participating clients: a cohort the config fixes, else the sample rate
    (default 1: full participation) times the train clients."""
    for key in COHORT_KEYS:
        if config.get(key) is not None:
            return float(config[key])
    return None if clients is None else float(config.get("sample_rate", 1.0)) * clients


def plan_run(
    suite: Suite,
    profile: ModelProfile,
    cell: tuple[str, float, int],
    clients: int | None,
) -> RunPlan:
    from benchmark.registry import METHODS
    from benchmark.run_models import run_hub_models, run_roles

    row, epsilon, seed = cell
    label = f"{row} ε={epsilon:g} seed={seed}"
    method = suite.method_of(row)  # a variant row runs its method
    roles = run_roles(method, suite.metrics)
    params = suite.spec(row, epsilon, seed, Path("unused")).method.params
    models = run_hub_models(profile, method, suite.metrics, params)
    rate = RATES.get((suite.profile, method))
    if rate is None:
        return RunPlan(label, roles, models, None, None, None)
    config = METHODS.get(method).resolve_config(suite.profile, params)
    rounds = next(config[k] for k in ROUNDS_KEYS if k in config)
    server = rounds * rate.server_seconds / 3600
    cohort = clients_per_round(config, clients)
    total = None if cohort is None else server + rounds * cohort * rate.client_seconds / 3600
    return RunPlan(label, roles, models, total, server, rate)


def plan_lines(suite: Suite, methods: Sequence[str] | None, splits_root: Path) -> list[str]:
    """The plan as printed: runs, models, hours, and where each rate comes from."""
    from benchmark.profiles import new_profile
    from benchmark.profiles.hub_fetch import merged, missing

    clients = train_clients(suite, splits_root)
    profile = new_profile(suite.profile)
    runs = [plan_run(suite, profile, cell, clients) for cell in suite.grid(methods)]
    models = merged(m for run in runs for m in run.models)
    absent = missing(models)
    lines = [
        f"suite {suite.name}: {len(runs)} runs, profile {suite.profile}, source {suite.source}, "
        f"train clients: {clients if clients is not None else 'unknown (split not built)'}",
        "models:",
    ]
    lines += [f"  {m.label()}: {'missing' if m in absent else 'cached'}" for m in models]
    if not models:
        lines.append("  no hub models (the profile's models ship with the project)")
    judges = [m["settings"]["judge"] for m in suite.metrics if m.get("settings", {}).get("judge")]
    lines += [f"evaluation judge: {judge_loads(j)}" for j in judges]
    lines.append("runs (hours of the method's rounds; its release and the evaluation: unknown):")
    for run in runs:
        by_id = [m.model_id for m in run.models if not set(m.roles) <= set(run.roles)]
        loads = ", ".join([*run.roles, *by_id]) or "-"
        lines.append(f"  {run.label}  models: {loads}  rounds: {_hours(run)}")
    bounds = [r.server_hours if r.rounds_hours is None else r.rounds_hours for r in runs]
    known = [h for h in bounds if h is not None]
    complete = sum(r.rounds_hours is not None for r in runs)
    lines.append(
        f"total: >= {sum(known):,.1f} GPU hours of method rounds ({len(known)} of {len(runs)} "
        f"runs have a rate, {complete} with their client part); releases and evaluation: unknown"
    )
    sources = sorted({r.rate.source for r in runs if r.rate is not None})
    lines += [f"rate source: {s}" for s in sources] or ["rate source: none for this profile"]
    return lines


def _hours(run: RunPlan) -> str:
    if run.rate is None:
        return "unknown (no measured or cited rate)"
    if run.rounds_hours is None:
        return f">= {run.server_hours:,.1f} h (server; clients unknown until the split is built)"
    return f"{run.rounds_hours:,.1f} h"
