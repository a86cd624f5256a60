"""``fedsynth privacy epsilon`` and ``fedsynth privacy noise`` through the real CLI."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from benchmark.cli.main import cli
from benchmark.privacy.accountants import epsilon

POPRI = ["--sample-rate", "1", "--steps", "20", "--delta", "3e-6"]


def invoke(*args: str):
    return CliRunner().invoke(cli, ["privacy", *args])


def test_acceptance_command_prints_popri_epsilon():
    command = (
        "fedsynth privacy epsilon --noise-multiplier 19.3 --sample-rate 1 --steps 20 "
        "--delta 3e-6 --accountant rdp"
    )
    result = CliRunner().invoke(cli, command.split()[1:])
    assert result.exit_code == 0, result.output
    assert float(result.output) == pytest.approx(1.0, abs=0.05)


def test_epsilon_json_has_inputs_and_result():
    result = invoke(
        "epsilon", "--noise-multiplier", "3.35", *POPRI, "--accountant", "pld", "--json"
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    assert payload == {
        "noise_multiplier": 3.35,
        "sample_rate": 1.0,
        "steps": 20,
        "delta": 3e-6,
        "accountant": "pld",
        "mechanism": "subsampled_gaussian",
        "epsilon": epsilon(3.35, 1.0, 20, 3e-6, "pld"),
    }
    assert payload["epsilon"] == pytest.approx(6.50, abs=0.01)


def test_epsilon_of_dpftrl_tree():
    result = invoke(
        "epsilon",
        "--noise-multiplier",
        "8.83",
        "--sample-rate",
        "1",
        "--steps",
        "1600",
        "--delta",
        "1e-6",
        "--mechanism",
        "tree_aggregation",
    )
    assert result.exit_code == 0, result.output
    assert float(result.output) == pytest.approx(1.77, abs=0.05)


def test_noise_prints_a_multiplier_that_meets_the_target():
    result = invoke("noise", "--epsilon", "1", *POPRI)
    assert result.exit_code == 0, result.output
    sigma = float(result.output)
    assert sigma == pytest.approx(19.3, abs=0.1)
    assert epsilon(sigma, 1.0, 20, 3e-6) <= 1.0


def test_noise_json_reports_achieved_epsilon():
    result = invoke("noise", "--epsilon", "7", *POPRI, "--accountant", "prv", "--json")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    assert {k: payload[k] for k in ("epsilon", "steps", "delta", "accountant")} == {
        "epsilon": 7.0,
        "steps": 20,
        "delta": 3e-6,
        "accountant": "prv",
    }
    assert payload["achieved_epsilon"] <= 7.0
    assert payload["achieved_epsilon"] == epsilon(payload["noise_multiplier"], 1.0, 20, 3e-6, "prv")


def test_tree_with_prv_is_a_usage_error_naming_rdp():
    result = invoke(
        "noise", "--epsilon", "2", *POPRI, "--accountant", "prv", "--mechanism", "tree_aggregation"
    )
    assert result.exit_code == 2
    assert "use accountant='rdp'" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--accountant", "gdp"], "'gdp' is not one of 'rdp', 'prv', 'pld'"),
        (["--sample-rate", "0"], "0.0<x<=1.0"),
        (["--steps", "0"], "x>=1"),
        (["--delta", "1"], "0.0<x<1.0"),
    ],
)
def test_invalid_options_are_rejected(args, message):
    result = invoke("epsilon", "--noise-multiplier", "1", *POPRI, *args)
    assert result.exit_code == 2
    assert message in result.output


def test_help_describes_both_commands():
    group = invoke("--help")
    assert group.exit_code == 0
    assert "not yet available" not in group.output
    assert "epsilon" in group.output and "noise" in group.output
    for command in ("epsilon", "noise"):
        text = invoke(command, "--help").output
        assert "--accountant [rdp|prv|pld]" in text
        assert "tree_aggregation" in text and "--json" in text
