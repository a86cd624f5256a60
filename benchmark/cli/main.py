"""Entry point of the ``fedsynth`` CLI; each command group lives in its own module.

The core defines the group and its own commands (``run``, ``methods``, ``datasets``,
``privacy``). The layers above it (the leaderboard, the split builders) and plugin
distributions add theirs through ``fedsynth.commands`` entry points, so the core imports
none of them (``tests/test_layers.py``)."""

from __future__ import annotations

import os
import tomllib
import warnings
from collections.abc import Iterable
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path

import click

from benchmark.cli.catalog import datasets_group, methods_group
from benchmark.cli.privacy import privacy_group
from benchmark.cli.run import run_command
from benchmark.registry import RegistryError, load_plugin_file

PROJECT = "fedsynth"
COMMANDS_GROUP = "fedsynth.commands"
# fedsynth's own declaration, when this code runs from a source checkout
CHECKOUT_PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


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


def contributed_commands(pyproject: Path = CHECKOUT_PYPROJECT) -> list[EntryPoint]:
    """The ``fedsynth.commands`` entry points: fedsynth's own layers' and any installed
    distribution's. fedsynth's own are read from the checkout's pyproject.toml when the
    code runs from one, since an editable install's metadata is written at install time
    and misses a command declared since."""
    declared = _declared_in(pyproject)
    installed = [
        ep
        for ep in entry_points(group=COMMANDS_GROUP)
        if declared is None or ep.dist is None or ep.dist.name != PROJECT
    ]
    return [*(declared or []), *installed]


def _declared_in(pyproject: Path) -> list[EntryPoint] | None:
    """fedsynth's ``fedsynth.commands`` table in ``pyproject``; None if it is not fedsynth's."""
    if not pyproject.is_file():
        return None
    project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
    if project.get("name") != PROJECT:
        return None
    table = project.get("entry-points", {}).get(COMMANDS_GROUP, {})
    return [EntryPoint(name, target, COMMANDS_GROUP) for name, target in table.items()]


def add_commands(group: click.Group, found: Iterable[EntryPoint]) -> None:
    """Add each entry point's command under its entry point's name; a name already taken
    (the core's own commands come first) keeps its command."""
    for ep in found:
        if ep.name not in group.commands:
            group.add_command(ep.load(), name=ep.name)


for _command in (run_command, methods_group, datasets_group, privacy_group):
    cli.add_command(_command)
add_commands(cli, contributed_commands())
