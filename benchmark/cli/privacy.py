"""``fedsynth privacy``: ε for a noise multiplier, and the noise multiplier for an ε."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

import click

from benchmark.privacy.accountants import (
    ACCOUNTANTS,
    SOLVABLE_MECHANISMS,
    epsilon,
    noise_multiplier_for,
)

_POSITIVE = click.FloatRange(min=0.0, min_open=True)
_OPEN_UNIT = click.FloatRange(min=0.0, max=1.0, min_open=True, max_open=True)


# The accounting settings both subcommands take, in the order --help and --json list them.
_SETTINGS = ("sample_rate", "steps", "delta", "accountant", "mechanism")


def _shared_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Options that both subcommands take, in the order --help lists them; the command gets
    the accounting settings as one ``settings`` dict (keys in :data:`_SETTINGS` order)."""
    options = [
        click.option(
            "--sample-rate",
            required=True,
            type=click.FloatRange(min=0.0, max=1.0, min_open=True),
            help="Poisson sampling rate of privacy units per step; 1 = full participation.",
        ),
        click.option(
            "--steps",
            required=True,
            type=click.IntRange(min=1),
            help="Number of noisy releases (rounds, DP-SGD steps), or the leaves of the tree "
            "with --mechanism tree_aggregation.",
        ),
        click.option("--delta", required=True, type=_OPEN_UNIT, help="Target δ, in (0, 1)."),
        click.option(
            "--accountant",
            type=click.Choice(ACCOUNTANTS),
            default="rdp",
            show_default=True,
            help="rdp: Rényi DP (dp-accounting); prv: PRV upper bound (opacus, eps_error "
            "0.01); pld: privacy loss distribution (dp-accounting). Tree aggregation: rdp only.",
        ),
        click.option(
            "--mechanism",
            type=click.Choice(SOLVABLE_MECHANISMS),
            default=SOLVABLE_MECHANISMS[0],
            show_default=True,
            help="subsampled_gaussian: --steps Gaussian releases at --sample-rate. "
            "tree_aggregation: one single-epoch DP-FTRL tree with --steps leaves, each "
            "privacy unit in at most one leaf (--sample-rate is not used for amplification).",
        ),
        click.option(
            "--json", "as_json", is_flag=True, help="Print a JSON object: inputs and result."
        ),
    ]

    @functools.wraps(command)
    def with_settings(**kwargs: Any) -> Any:
        settings = {key: kwargs.pop(key) for key in _SETTINGS}
        return command(settings=settings, **kwargs)

    for option in reversed(options):
        with_settings = option(with_settings)
    return with_settings


def _emit(result: dict[str, Any], key: str, as_json: bool) -> None:
    """Full precision, never rounded: a rounded-down noise multiplier could miss the target."""
    click.echo(json.dumps(result) if as_json else repr(result[key]))


def _call(fn: Callable[..., float], *args: Any, **kwargs: Any) -> float:
    try:
        return fn(*args, **kwargs)
    except ValueError as exc:  # e.g. prv/pld asked for tree aggregation
        raise click.UsageError(str(exc)) from exc


@click.group("privacy")
def privacy_group() -> None:
    """Privacy accounting: ε for a noise multiplier, or the noise multiplier for an ε.

    These are the accountants the harness applies to its privacy ledger after a run.
    """


@privacy_group.command("epsilon")
@click.option(
    "--noise-multiplier",
    required=True,
    type=_POSITIVE,
    help="Gaussian noise std divided by the L2 sensitivity (clip norm).",
)
@_shared_options
def epsilon_command(noise_multiplier: float, settings: dict[str, Any], as_json: bool) -> None:
    """Print the ε at --delta of --steps releases with this noise multiplier.

    Example: fedsynth privacy epsilon --noise-multiplier 19.3 --sample-rate 1
    --steps 20 --delta 3e-6 prints 0.9972741870077821 (POPri's ε ≈ 1).
    """
    eps = _call(epsilon, noise_multiplier, **settings)
    result = {"noise_multiplier": noise_multiplier, **settings, "epsilon": eps}
    _emit(result, "epsilon", as_json)


@privacy_group.command("noise")
@click.option("--epsilon", "target", required=True, type=_POSITIVE, help="Target ε (> 0).")
@_shared_options
def noise_command(target: float, settings: dict[str, Any], as_json: bool) -> None:
    """Print the smallest noise multiplier whose ε at --delta is at most --epsilon.

    Found by bisection to 0.01 % relative precision, always on the safe side: the
    printed value meets the target. --json also reports the ε it achieves.
    """
    sigma = _call(noise_multiplier_for, target, **settings)
    result = {
        "epsilon": target,
        **settings,
        "noise_multiplier": sigma,
        "achieved_epsilon": epsilon(sigma, **settings),
    }
    _emit(result, "noise_multiplier", as_json)
