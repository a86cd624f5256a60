"""Hyperparameter selection on validation (leaderboard/tuning.py, leaderboard/selection.py):
a grid of suite runs, the selection on a validation metric, a signed report that verify
checks against the kept records."""

import json
import math
import shutil

import pytest

from leaderboard.catalog import SUITES
from leaderboard.cli.suite import parse_grid
from leaderboard.selection import SHARED_NOTE, UNCHARGED_NOTE, best_index, grid_points
from leaderboard.signing import host_key, sign_entry
from leaderboard.store import record_files
from leaderboard.tuning import tune
from leaderboard.verify import verify_tree

pytestmark = pytest.mark.end_to_end  # scheduled first (tests/conftest.py)

NAN = math.nan


def test_a_grid_is_every_combination_in_order_and_a_diverged_run_never_wins():
    points = grid_points({"client_lr": [0.1, 0.01], "clip_norm": [1.0, 0.1]})
    assert points[0] == {"client_lr": 0.1, "clip_norm": 1.0}
    assert len(points) == 4 and points[3] == {"client_lr": 0.01, "clip_norm": 0.1}
    assert best_index([0.2, NAN, 0.3], lower_is_better=False) == 2
    assert best_index([NAN, 4.0, 3.0], lower_is_better=True) == 2
    assert best_index([0.3, 0.3], lower_is_better=False) == 0  # the first of a tie
    with pytest.raises(ValueError, match="no candidate"):
        best_index([NAN, NAN], lower_is_better=False)
    assert parse_grid(("rounds=10,20", "name=a")) == {"rounds": [10, 20], "name": ["a"]}
    with pytest.raises(ValueError, match="at least one value"):
        grid_points({"client_lr": []})
    with pytest.raises(ValueError, match="twice"):
        grid_points({"client_lr": [0.1, 0.1]})


def test_tuning_selects_on_validation_keeps_its_runs_and_verify_checks_the_report(tmp_path):
    suite = SUITES["tiny"]
    results = tmp_path / "results"
    roots = {"results_root": results, "splits_root": tmp_path / "splits"}
    grid = {"client_lr": [0.0, 0.05]}
    with pytest.raises(ValueError, match="never on test"):
        tune(suite, "dp_fedavg", grid, runs_root=tmp_path / "r0", select="next_token.top1", **roots)
    assert not (tmp_path / "r0").exists()

    report, path = tune(suite, "dp_fedavg", grid, runs_root=tmp_path / "r1", **roots)
    values = [c["value"] for c in report["candidates"]]
    assert [c["params"] for c in report["candidates"]] == [{"client_lr": 0.0}, {"client_lr": 0.05}]
    assert report["selected"] == report["candidates"][values.index(max(values))]["params"]
    assert "next_token.top1" not in json.dumps(report)  # no test number in the report
    assert report["suite_definition"] == suite.definition.to_dict()  # what it was made under
    assert verify_tree(results, trust_host=True) == []
    # A candidate is measured on what selects, and trains with the suite's canaries.
    first = report["candidates"][0]["run_key"]
    (record,) = [r for r in record_files(results) if r.stem == first]
    metrics = json.loads(record.read_text())["spec"]["evaluation"]["metrics"]
    assert [m["name"] for m in metrics] == ["next_token", "canary"]

    # The candidates' records are kept: tuning again on a fresh machine runs nothing.
    shutil.rmtree(tmp_path / "r1")
    again, _ = tune(suite, "dp_fedavg", grid, runs_root=tmp_path / "r2", **roots)
    assert again == report and not (tmp_path / "r2").exists()

    # Verify checks the selection itself, not only the signature: a report re-signed with
    # the host key after its selection was changed, or copied under another cell, fails.
    # (Validation top-1 may tie across the candidates: the DP noise is secret per run, and
    # the first of a tie wins, so "not the best" is any candidate but the selected one.)
    body = {k: v for k, v in report.items() if k != "signature"}
    (worse,) = [c["params"] for c in report["candidates"] if c["params"] != report["selected"]]
    path.write_text(json.dumps(sign_entry({**body, "selected": worse}, host_key(results))))
    assert "not the candidate with the best" in problems(results, path)[0]
    path.write_text(json.dumps(report))
    moved = path.with_name(path.name.replace("seed0", "seed1"))
    shutil.copy(path, moved)
    assert "wrong place" in problems(results, moved)[0]


def problems(results, path):
    """What verify (with the host's key trusted) finds wrong with ``path``."""
    return [reason for bad, reason in verify_tree(results, trust_host=True) if bad == path]


def test_a_release_sampling_grid_post_processes_one_runs_private_rounds(tmp_path):
    """The first candidate runs the rounds; the others only sample the release again from
    them (benchmark.shared_rounds), so the report can say the selection costs no privacy,
    and verify checks that claim against the candidates' records."""
    results = tmp_path / "results"
    roots = {"results_root": results, "splits_root": tmp_path / "splits"}
    grid = {"release_temperature": [1.0, 0.7]}
    report, path = tune(SUITES["tiny"], "pre_text", grid, runs_root=tmp_path / "runs", **roots)
    first, second = (c["run_key"] for c in report["candidates"])
    records = {r.stem: json.loads(r.read_text()) for r in record_files(results)}
    assert records[second]["rounds"] == records[first]["rounds"]
    assert records[first]["rounds"]["run_key"] == first
    assert records[second]["privacy"]["ledger"] == records[first]["privacy"]["ledger"]
    assert report["accounting"] == SHARED_NOTE
    assert verify_tree(results, trust_host=True) == []
    body = {k: v for k, v in report.items() if k != "signature"}
    path.write_text(json.dumps(sign_entry({**body, "accounting": "free"}, host_key(results))))
    assert "accounting is not" in problems(results, path)[0]
    # a grid over what the rounds read runs each candidate's own rounds, and says so
    grid = {"population_size": [8, 12]}
    report, _ = tune(SUITES["tiny"], "pre_text", grid, runs_root=tmp_path / "runs", **roots)
    assert report["accounting"] == UNCHARGED_NOTE
