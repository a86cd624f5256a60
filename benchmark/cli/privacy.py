"""``fedsynth privacy``: ε for a noise multiplier, and the noise multiplier for an ε."""

from __future__ import annotations

import click


@click.group("privacy")
def privacy_group() -> None:
    """Privacy accounting (not yet available)."""
