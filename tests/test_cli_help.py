"""Every command of the CLI has working, non-empty --help, and the layers above the core
add theirs through entry points."""

import importlib
import tomllib
from pathlib import Path
from types import SimpleNamespace

import click
from click.testing import CliRunner

from benchmark.cli import main
from benchmark.cli.main import COMMANDS_GROUP, cli
from benchmark.cli.run import run_command

ROOT = Path(__file__).resolve().parent.parent


def walk(command, path=()):
    yield path, command
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from walk(sub, (*path, name))


def test_every_command_has_help():
    runner = CliRunner()
    paths = list(walk(cli))
    assert {("run",), ("privacy", "epsilon"), ("splits", "build"), ("methods", "list")} <= {
        p for p, _ in paths
    }
    for path, command in paths:
        result = runner.invoke(cli, [*path, "--help"])
        assert result.exit_code == 0, (path, result.output)
        assert command.help and len(command.help.strip()) > 10, path


def test_the_layers_above_the_core_add_their_commands_by_entry_point():
    """pyproject.toml declares the leaderboard's and the builders' commands; the core's group
    holds exactly those objects, under those names, and defines only its own."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = project["entry-points"][COMMANDS_GROUP]
    assert {"leaderboard", "suite", "quickstart", "submit", "splits"} <= set(declared)
    for name, target in declared.items():
        module, _, attribute = target.partition(":")
        assert module.split(".")[0] in {"leaderboard", "datasets_builders"}, target
        assert cli.commands[name] is getattr(importlib.import_module(module), attribute)
    assert {c.callback.__module__.split(".")[0] for c in cli.commands.values()} == {
        "benchmark",
        "leaderboard",
        "datasets_builders",
    }


def installed(name: str, target: str, distribution: str) -> SimpleNamespace:
    """An installed distribution's entry point, as importlib.metadata lists it."""
    return SimpleNamespace(name=name, value=target, dist=SimpleNamespace(name=distribution))


def test_a_checkouts_declaration_replaces_a_stale_editable_install(tmp_path, monkeypatch):
    # fedsynth's installed metadata names a command the checkout no longer declares; a
    # plugin distribution adds its own
    stale = installed("old", "leaderboard.gone:group", "fedsynth")
    plugin = installed("extra", "their_package.cli:group", "their-package")
    monkeypatch.setattr(main, "entry_points", lambda group: [stale, plugin])
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        '[project]\nname = "fedsynth"\n'
        '[project.entry-points."fedsynth.commands"]\nnew = "leaderboard.cli.suite:submit"\n'
    )
    found = main.contributed_commands(pyproject)
    assert [(ep.name, ep.value) for ep in found] == [
        ("new", "leaderboard.cli.suite:submit"),
        ("extra", "their_package.cli:group"),
    ]
    # not a checkout (an installed wheel), or another project's pyproject.toml: the metadata
    assert main.contributed_commands(tmp_path / "absent.toml") == [stale, plugin]
    pyproject.write_text('[project]\nname = "other"\n')
    assert main.contributed_commands(pyproject) == [stale, plugin]


def test_a_contributed_command_does_not_replace_one_already_there():
    @click.command()
    def hello() -> None:
        """Says hello to the caller."""

    group = click.Group(commands={"run": run_command})
    mine = SimpleNamespace(name="run", load=lambda: hello)
    theirs = SimpleNamespace(name="greet", load=lambda: hello)
    main.add_commands(group, [mine, theirs])
    assert group.commands == {"run": run_command, "greet": hello}
