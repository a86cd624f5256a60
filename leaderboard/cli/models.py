"""``fedsynth models fetch``: download the hub models a grid of runs needs, before it runs.

A run's sandbox has no network and a read-only cache, and a GPU host is often offline, so
the ``paper`` profile's models are fetched ahead, where the hub is reachable. What a grid
needs is read from the declarations (:mod:`benchmark.run_models`): its methods' roles and
its metrics' for each method's kind of release.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from benchmark.profiles import PROFILES, ModelUnavailableError, new_profile
from benchmark.profiles.hub_fetch import HubModel, fetch, missing
from benchmark.registry import METHODS, METRICS, RegistryError
from leaderboard.catalog import get_suite


@click.group("models")
def models_group() -> None:
    """The hub models a profile's runs load (``paper``: the papers' models)."""


def grid_runs(
    suite_name: str | None, methods: Sequence[str] | None
) -> list[tuple[str, list[dict[str, Any]], dict[str, Any]]]:
    """(method, metrics, params) of each run of the grid: a suite's, or ``methods``
    (default: every registered one) with their defaults under every registered metric."""
    if suite_name is not None:
        suite = get_suite(suite_name)
        return [
            (m, list(suite.metrics), suite.spec(m, eps, seed, Path("unused")).method.params)
            for m, eps, seed in suite.grid(methods)
        ]
    metrics = [{"name": name, "settings": {}} for name in METRICS.names()]
    return [(m, metrics, {}) for m in methods or METHODS.names()]


def needed(profile: str, suite_name: str | None, methods: Sequence[str] | None) -> list[HubModel]:
    from benchmark.run_models import grid_hub_models

    return grid_hub_models(new_profile(profile), grid_runs(suite_name, methods))


@models_group.command("fetch")
@click.option(
    "--profile",
    type=click.Choice(sorted(PROFILES)),
    default="paper",
    show_default=True,
    help="The profile whose models to fetch (only paper loads hub models).",
)
@click.option(
    "--methods",
    default=None,
    help="Comma-separated methods (default: the suite's, else every registered one).",
)
@click.option("--suite", "suite_name", default=None, help="Fetch what this suite's grid needs.")
@click.option("--check", is_flag=True, help="Download nothing: list what is missing and fail.")
def fetch_models(profile: str, methods: str | None, suite_name: str | None, check: bool) -> None:
    """Download (into HF_HOME's cache) the hub models the runs of a grid load: their
    methods' declared roles and their metrics'. Gated models (meta-llama/*) need an
    accepted licence and `hf auth login` first."""
    chosen = [m.strip() for m in methods.split(",") if m.strip()] if methods else None
    try:
        models = needed(profile, suite_name, chosen)
    except (RegistryError, ValueError) as exc:
        raise click.ClickException(str(exc)) from exc
    if not models:
        click.echo(f"profile {profile}: its runs load no hub models")
        return
    absent = missing(models)
    for model in models:
        click.echo(f"{model.label()}: {'missing' if model in absent else 'cached'}")
    if check and absent:
        raise click.ClickException(
            f"{len(absent)} of {len(models)} missing: " + ", ".join(m.model_id for m in absent)
        )
    if not check:
        try:
            fetched = fetch(models)
        except ModelUnavailableError as exc:
            raise click.ClickException(str(exc)) from exc
        for model, size in fetched.items():
            click.echo(f"fetched {model.model_id}@{model.revision}: {size / 1e9:.2f} GB")
    click.echo(f"profile {profile}: {len(models)} hub model(s), all in the local cache")
