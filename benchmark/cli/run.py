"""``fedsynth run SPEC``: run one spec end to end (resumable)."""

from __future__ import annotations

from pathlib import Path

import click

from benchmark.artifact import ArtifactError
from benchmark.privacy.errors import PrivacyError
from benchmark.registry import RegistryError, UnsafePathError
from benchmark.spec import SpecError, load_spec


@click.command("run")
@click.argument("spec", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--runs-dir",
    type=click.Path(file_okay=False),
    default="runs",
    show_default=True,
    help="Where run state and result records are written (runs/<run-key>/).",
)
def run_command(spec: str, runs_dir: str) -> None:
    """Run the method of SPEC (YAML/JSON) and write its result record.

    The harness loads the split, hands the method a client pool (clipped, noised,
    ledger-recorded aggregates only), checks the ledger's epsilon against the budget,
    evaluates the released artifact and writes runs/<run-key>/result.json. Running the
    same spec again resumes from the last finished round.
    """
    from benchmark.isolation.coordinator import MethodError
    from benchmark.runner import RunBusy, UnsafeCheckpointError, run

    try:
        result = run(load_spec(spec), runs_root=Path(runs_dir), isolated=True)
    except (
        SpecError,
        RegistryError,
        PrivacyError,
        ArtifactError,
        UnsafePathError,
        UnsafeCheckpointError,
        MethodError,
        RunBusy,
    ) as exc:  # a bad spec, split, checkpoint or release, or a busy run: one line
        raise click.ClickException(" ".join(str(exc).split())) from exc
    privacy = result.record["privacy"]
    click.echo(f"run: {result.run_key}")
    click.echo(
        f"epsilon: {privacy['epsilon']} (budget {privacy['epsilon_budget']}, "
        f"{privacy['accountant']}, delta={privacy['delta']:g})"
    )
    for name, value in sorted(result.record["metrics"].items()):
        click.echo(f"{name}: {value}")
    click.echo(f"record: {result.run_dir / 'result.json'}")
