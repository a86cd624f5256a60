"""Every command of the CLI has working, non-empty --help."""

import click
from click.testing import CliRunner

from benchmark.cli.main import cli


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
