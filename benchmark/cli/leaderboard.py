"""``fedsynth leaderboard``: browse, verify and publish result records."""

from __future__ import annotations

import click


@click.group("leaderboard")
def leaderboard_group() -> None:
    """Browse and publish the versioned leaderboard (not yet available)."""


@leaderboard_group.command("show")
def show() -> None:
    """Print the leaderboard table (not yet available)."""
    raise click.ClickException("`leaderboard show` is not yet available")
