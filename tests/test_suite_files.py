"""Suites as data: every file in leaderboard/suite_defs/ loads into the suite it names, with
its version and digest, and the loader refuses what is not a suite definition."""

import math
from pathlib import Path

import pytest

from benchmark.evaluation.downstream import DownstreamConfig
from leaderboard.catalog import SUITES
from leaderboard.preparations import PREPARATIONS, warm_teacher
from leaderboard.suite_files import SUITE_DIR, SuiteFileError, load_suite, load_suites

BASE = """\
name: demo
version: 1
description: a suite
source: kjv
split_options: {}
profile: tiny
epsilons: [1.0]
delta: 1e-5
seeds: [0]
metrics: [{name: next_token, settings: {}}]
methods: [public_only]
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_every_file_is_a_suite_under_its_own_name_with_a_version_and_digest():
    files = sorted(p.stem for p in SUITE_DIR.glob("*.yaml") if not p.name.startswith("_"))
    assert sorted(SUITES) == files
    for name, suite in SUITES.items():
        assert suite.definition.file == f"leaderboard/suite_defs/{name}.yaml"
        assert suite.definition.version >= 1 and len(suite.definition.sha256) == 64


def test_rates_without_a_dot_are_numbers_and_inf_is_infinite(tmp_path):
    suite = load_suite(write(tmp_path, "demo.yaml", BASE.replace("[1.0]", "[1.0, .inf]")), {})
    assert suite.delta == 1e-5 and isinstance(suite.delta, float)
    assert suite.epsilons == (1.0, math.inf) and suite.seeds == (0,)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (BASE + "epsilon_grid: [1]\n", "unknown key 'epsilon_grid'"),
        (BASE.replace("name: demo", "name: other"), "not the file's"),
        (BASE.replace("version: 1", "version: 0"), "version must be"),
        (BASE.replace("seeds: [0]\n", ""), "missing 'seeds'"),
        (BASE + "prepare: warm_everything\n", "prepare 'warm_everything'"),
        (BASE + "variants: {a: {method: x, epsilon: 1, param: {}}}\n", "unknown key 'param'"),
    ],
)
def test_what_is_not_a_suite_definition_is_refused(tmp_path, text, error):
    with pytest.raises(SuiteFileError, match=error):
        load_suite(write(tmp_path, "demo.yaml", text), PREPARATIONS)


def test_an_include_is_merged_under_the_file_and_a_base_is_not_a_suite(tmp_path):
    write(tmp_path, "_base.yaml", BASE.replace("name: demo\n", "") + "downstream: {epochs: 3}\n")
    write(
        tmp_path,
        "view.yaml",
        "name: view\nversion: 2\ndescription: d\ninclude: _base.yaml\n"
        "downstream: {start: generic}\nprepare: warm_teacher\n",
    )
    suites = load_suites(PREPARATIONS, tmp_path)
    assert list(suites) == ["view"]
    view = suites["view"]
    assert view.downstream == {"epochs": 3, "start": "generic"}
    assert view.prepare is warm_teacher and view.definition.version == 2


def test_the_digest_follows_the_definition_not_its_comments(tmp_path):
    first = load_suite(write(tmp_path, "demo.yaml", BASE), {}).definition.sha256
    commented = load_suite(write(tmp_path, "demo.yaml", "# why\n" + BASE), {}).definition
    changed = load_suite(write(tmp_path, "demo.yaml", BASE.replace("[0]", "[0, 1]")), {})
    assert commented.sha256 == first != changed.definition.sha256


def test_the_bench_bound_trains_with_the_evaluators_recipe():
    bench = SUITES["bench"]
    recipe = DownstreamConfig(**bench.downstream)
    assert bench.method_params["nonprivate"] == {
        "epochs": recipe.epochs, "lr": recipe.lr, "batch_size": recipe.batch_size
    }  # fmt: skip


def test_paper001s_delta_is_one_over_n_ln_n_at_its_train_clients():
    n = 28  # 100 clients dealt, 5 % validation, 67 % test
    assert SUITES["paper001"].delta == 1 / (n * math.log(n))


def test_paper002_runs_on_the_benchs_split():
    bench, paper002 = SUITES["bench"], SUITES["paper002"]
    assert (paper002.source, paper002.split_options) == (bench.source, bench.split_options)


def test_every_suite_lists_the_canary_audit():
    """No entry is published without the one-run audit's ε lower bound
    (test_published_results), so a suite without the audit would run hours for entries that
    cannot be published (paper001 version 1 did)."""
    missing = [n for n, s in SUITES.items() if all(m["name"] != "canary" for m in s.metrics)]
    assert missing == []
