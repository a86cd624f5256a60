"""Entry point of the ``fedsynth`` CLI; each command group lives in its own module."""

from __future__ import annotations

import os
import warnings

import click

from benchmark.cli.catalog import datasets_group, methods_group
from benchmark.cli.leaderboard import leaderboard_group
from benchmark.cli.models import models_group
from benchmark.cli.privacy import privacy_group
from benchmark.cli.run import run_command
from benchmark.cli.splits import splits_group
from benchmark.cli.suite import quickstart, submit, suite_group
from benchmark.registry import RegistryError, load_plugin_file


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--plugin",
    "plugins",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False),
    help="Python file that registers extra methods, datasets or metrics (repeatable).",
)
def cli(plugins: tuple[str, ...]) -> None:
    """fedsynth: benchmark DP learning from private federated text.

    Build date-filtered federated splits, run DP methods through one privacy
    boundary (the harness clips, noises and accounts for every release), evaluate
    them the same way, and browse the leaderboard.
    """
    quiet_libraries()
    for path in plugins:
        try:
            load_plugin_file(path)
        except RegistryError as exc:
            raise click.ClickException(str(exc)) from exc


def quiet_libraries() -> None:
    """Keep the terminal to fedsynth's own progress bars and messages: the libraries' load
    and save bars and their informational warnings (e.g. transformers' ``loss_type``
    notice on every GPT-2 load) would bury them."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # read by transformers too
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    warnings.filterwarnings("ignore", category=FutureWarning, module="transformers")


cli.add_command(run_command)
cli.add_command(splits_group)
cli.add_command(leaderboard_group)
cli.add_command(methods_group)
cli.add_command(datasets_group)
cli.add_command(privacy_group)
cli.add_command(quickstart)
cli.add_command(submit)
cli.add_command(suite_group)
cli.add_command(models_group)
