"""Suite definitions: every method parameter a suite sets is one its adapter accepts, and
the run grid follows the per-ε seeds."""

import math

import pytest

import methods  # noqa: F401  (registers the built-in adapters)
from benchmark.registry import METHODS
from leaderboard.suites import SUITES


@pytest.mark.parametrize("name", sorted(SUITES))
def test_every_suite_parameter_resolves_and_validates_for_its_profile(name):
    """Resolving checks the names; constructing the adapter checks the values together
    (e.g. POPri's ℓ ≤ J), so a suite cannot fail at its last method after hours of runs."""
    suite = SUITES[name]
    for method in suite.methods:
        cls = METHODS.get(method)
        cls(cls.resolve_config(suite.profile, suite.method_params.get(method, {})))


def test_the_bench_grid_has_three_seeds_at_eps_1_and_one_at_eps_7():
    grid = SUITES["bench"].grid(["popri", "oracle", "public_only"])
    assert [(e, s) for m, e, s in grid if m == "popri"] == [(1.0, 0), (1.0, 1), (1.0, 2), (7.0, 0)]
    assert [(e, s) for m, e, s in grid if m == "oracle"] == [(math.inf, s) for s in (0, 1, 2)]
    assert [(e, s) for m, e, s in grid if m == "public_only"] == [(0.0, s) for s in (0, 1, 2)]
