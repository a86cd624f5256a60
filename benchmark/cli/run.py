"""``fedsynth run SPEC``: run one spec end to end (resumable)."""

from __future__ import annotations

import click


@click.command("run")
@click.argument("spec", type=click.Path(exists=True, dir_okay=False))
def run_command(spec: str) -> None:
    """Run the method of SPEC (YAML/JSON) and write its result record (not yet available)."""
    raise click.ClickException("`run` is not yet available")
