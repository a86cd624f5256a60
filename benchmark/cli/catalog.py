"""``fedsynth methods list`` and ``fedsynth datasets list``: what is registered."""

from __future__ import annotations

import click

from benchmark.registry import DATASETS, METHODS, Registry


def _list(registry: Registry) -> None:
    names = registry.names()
    if not names:
        click.echo(f"no {registry.kind}s registered")
    for name in names:
        click.echo(name)


@click.group("methods")
def methods_group() -> None:
    """Method adapters (built-in and plugins)."""


@methods_group.command("list")
def list_methods() -> None:
    """List the registered method adapters by name."""
    _list(METHODS)


@click.group("datasets")
def datasets_group() -> None:
    """Dataset builders (built-in and plugins)."""


@datasets_group.command("list")
def list_datasets() -> None:
    """List the registered dataset sources by name."""
    _list(DATASETS)
