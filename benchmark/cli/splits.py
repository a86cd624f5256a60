"""``fedsynth splits``: build, list, show, verify and check federated splits."""

from __future__ import annotations

import click


@click.group("splits")
def splits_group() -> None:
    """Build and inspect versioned federated splits (not yet available)."""


@splits_group.command("build")
def build() -> None:
    """Build a split (not yet available)."""
    raise click.ClickException("`splits build` is not yet available")
