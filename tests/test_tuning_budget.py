"""Equal tuning: every tuned method of a suite gets a declared grid of the same size, the
DP-FL grid keeps paper 000's as a subset and reaches past its corner, and the LLM methods'
grid names release-sampling parameters their configs really have."""

import math

import pytest
from click.testing import CliRunner

from benchmark.cli.main import cli
from benchmark.registry import METHODS
from leaderboard.catalog import SUITES
from leaderboard.selection import grid_points

PAPER_000_GRID = {"client_lr": [0.001, 0.01, 0.1], "clip_norm": [0.01, 0.1, 1.0]}


@pytest.mark.parametrize("suite", [s for s in SUITES.values() if s.tuning], ids=lambda s: s.name)
def test_every_tuned_method_gets_the_same_number_of_candidates(suite):
    sizes = {method: len(grid_points(grid)) for method, grid in suite.tuning.items()}
    assert len(set(sizes.values())) == 1, sizes
    assert set(suite.tuning) <= set(suite.methods)


@pytest.mark.parametrize("method", ["dp_fedavg", "dp_ftrl"])
def test_the_dp_fl_grid_extends_paper_000s_past_its_corner(method):
    bench_grid = SUITES["bench"].tuning[method]
    assert SUITES["paper000-congress"].tuning[method] == PAPER_000_GRID
    for name, values in PAPER_000_GRID.items():
        assert set(values) < set(bench_grid[name])
        assert max(bench_grid[name]) > max(values)


@pytest.mark.parametrize("method", sorted(SUITES["bench"].tuning))
def test_each_grid_parameter_is_one_of_the_methods_own(method):
    config = METHODS.get(method).resolve_config("cpu", {})
    for name, values in SUITES["bench"].tuning[method].items():
        assert name in config, (method, name)
        assert all(isinstance(v, float) and math.isfinite(v) for v in values)


def test_suite_tune_without_a_grid_needs_a_declared_one():
    result = CliRunner().invoke(cli, ["suite", "tune", "quick", "--method", "dp_fedavg"])
    assert result.exit_code != 0 and "declares no grid for 'dp_fedavg'" in result.output
