"""Suite definitions: every method parameter a suite sets is one its adapter accepts, and
the run grid follows the per-ε seeds."""

import dataclasses
import math
from pathlib import Path

import pytest

import methods  # noqa: F401  (registers the built-in adapters)
from benchmark.registry import METHODS
from leaderboard.catalog import SUITES
from leaderboard.schema import EntryError

pytestmark = pytest.mark.end_to_end  # scheduled first (tests/conftest.py)


@pytest.mark.parametrize("name", sorted(SUITES))
def test_every_suite_parameter_resolves_and_validates_for_its_profile(name):
    """Resolving checks the names; constructing the adapter checks the values together
    (e.g. POPri's ℓ ≤ J), so a suite cannot fail at its last method after hours of runs."""
    suite = SUITES[name]
    for method in suite.methods:
        cls = METHODS.get(suite.method_of(method))
        for epsilon in suite.budgets(method):
            params = suite.spec(method, epsilon, 0, Path("unused")).method.params
            cls(cls.resolve_config(suite.profile, params))


def test_a_selection_applies_at_its_own_epsilon_and_a_candidate_overrides_it():
    suite = dataclasses.replace(
        SUITES["bench"], selected_params={"dp_fedavg": {1.0: {"client_lr": 0.1}}}
    )

    def params(epsilon, candidate=None):
        return suite.spec("dp_fedavg", epsilon, 0, Path("unused"), candidate).method.params

    assert params(1.0) == {**suite.method_params["dp_fedavg"], "client_lr": 0.1}
    assert params(7.0) == suite.method_params["dp_fedavg"]
    assert params(1.0, {"client_lr": 0.01})["client_lr"] == 0.01


def test_the_bench_grid_has_three_seeds_at_every_budget():
    grid = SUITES["bench"].grid(["popri", "oracle", "public_only"])
    popri = [(e, s) for m, e, s in grid if m == "popri"]
    assert popri == [(e, s) for e in (1.0, 7.0) for s in (0, 1, 2)]
    assert [(e, s) for m, e, s in grid if m == "oracle"] == [(math.inf, s) for s in (0, 1, 2)]
    assert [(e, s) for m, e, s in grid if m == "public_only"] == [(0.0, s) for s in (0, 1, 2)]


def test_finished_only_writes_entries_from_finished_runs_and_runs_nothing(tmp_path):
    """A long grid's rows can be published as they finish: ``finished_only`` builds entries
    from the runs already under ``runs_root`` and starts none of the others."""
    from leaderboard.suites import run_suite

    suite = dataclasses.replace(SUITES["tiny"], metrics=())
    roots = {"runs_root": tmp_path / "runs", "splits_root": tmp_path / "splits"}
    run_suite(suite, methods=["public_only"], results_root=tmp_path / "a", **roots)
    runs_before = sorted(p.name for p in (tmp_path / "runs").iterdir())
    entries = run_suite(
        suite,
        methods=["public_only", "oracle"],
        results_root=tmp_path / "b",
        finished_only=True,
        **roots,
    )
    assert [e["method"]["name"] for e in entries] == ["public_only"]
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == runs_before


def test_the_store_keeps_each_runs_record_and_a_grid_resumes_from_it(tmp_path):
    """A grid's run directories may be lost with the machine (a long grid over sessions):
    the signed records kept in the results store rebuild the same entry, and only the
    runs the store lacks are run."""
    import json
    import shutil

    from leaderboard.store import entry_files, record_files
    from leaderboard.suites import run_suite
    from leaderboard.verify import verify_tree

    suite = dataclasses.replace(SUITES["tiny"], metrics=(), seeds=(0, 1))
    results = tmp_path / "results"
    roots = {"results_root": results, "splits_root": tmp_path / "splits"}
    (first,) = run_suite(suite, methods=["public_only"], runs_root=tmp_path / "r1", **roots)
    assert len(record_files(results)) == 2
    shutil.rmtree(tmp_path / "r1")

    (rebuilt,) = run_suite(
        suite, methods=["public_only"], runs_root=tmp_path / "r2", finished_only=True, **roots
    )
    assert rebuilt == first
    assert not (tmp_path / "r2").exists()

    wider = dataclasses.replace(suite, seeds=(0, 1, 2))
    (grown,) = run_suite(wider, methods=["public_only"], runs_root=tmp_path / "r3", **roots)
    assert grown["spec"]["seeds"] == [0, 1, 2]
    assert [p.name for p in (tmp_path / "r3").iterdir()] == [grown["runs"][2]]
    assert verify_tree(results, trust_host=True) == []

    # adopting a tuned parameter changes the cell's spec digest: the new runs' entry
    # replaces the cell's old one (one row per cell), and the old runs' records stay
    tuned = dataclasses.replace(
        suite, seeds=(0,), selected_params={"public_only": {0.0: {"public_epochs": 1}}}
    )
    (replaced,) = run_suite(tuned, methods=["public_only"], runs_root=tmp_path / "r3", **roots)
    assert replaced["entry_key"] != grown["entry_key"]
    assert [p.stem for p in entry_files(results)] == [replaced["entry_key"]]
    assert len(record_files(results)) == 4

    record = record_files(results)[0]
    edited = json.loads(record.read_text())
    edited["wall_seconds"] += 1.0
    record.write_text(json.dumps(edited))
    problems = [reason for path, reason in verify_tree(results, trust_host=True) if path == record]
    assert any(reason.startswith("run record") for reason in problems)
    with pytest.raises(EntryError, match="does not verify"):
        run_suite(suite, methods=["public_only"], runs_root=tmp_path / "r4", **roots)


def test_a_split_built_under_other_options_is_rebuilt_not_reused(tmp_path):
    """A suite file's new version may change its split options (quick v2: one span per
    chapter); a split the old version built under the same name must not be reused."""
    from benchmark.split_storage import load_split
    from leaderboard.suites import ensure_split

    old = dataclasses.replace(SUITES["tiny"], split_options={"max_records": 300, "cap": 2})
    new = dataclasses.replace(old, split_options={"max_records": 300, "cap": 1})
    path = ensure_split(old, tmp_path)
    first = load_split(path).content_hash
    assert ensure_split(old, tmp_path) == path and load_split(path).content_hash == first
    rebuilt = load_split(ensure_split(new, tmp_path))
    assert rebuilt.content_hash != first
    assert max(len(v) for v in rebuilt.by_client("train").values()) == 1
