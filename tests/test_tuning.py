"""Hyperparameter selection on validation (leaderboard/tuning.py): a grid of suite runs,
the selection on a validation metric, a signed report that verify checks."""

import json
import shutil

import pytest

from benchmark.cli.suite import parse_grid
from leaderboard.store import record_files
from leaderboard.suites import SUITES
from leaderboard.tuning import best_index, grid_points, tune
from leaderboard.verify import verify_tree


def test_a_grid_is_every_combination_in_order_and_a_diverged_run_never_wins():
    points = grid_points({"client_lr": [0.1, 0.01], "clip_norm": [1.0, 0.1]})
    assert points[0] == {"client_lr": 0.1, "clip_norm": 1.0}
    assert len(points) == 4 and points[3] == {"client_lr": 0.01, "clip_norm": 0.1}
    assert best_index([0.2, float("nan"), 0.3], "next_token.validation_top1") == 2
    assert best_index([4.0, 3.0], "next_token.ce") == 1
    assert parse_grid(("rounds=10,20", "name=a")) == {"rounds": [10, 20], "name": ["a"]}
    with pytest.raises(ValueError, match="at least one value"):
        grid_points({"client_lr": []})


def test_tuning_selects_on_validation_keeps_its_runs_and_verify_checks_the_report(tmp_path):
    suite = SUITES["tiny"]
    roots = {"results_root": tmp_path / "results", "splits_root": tmp_path / "splits"}
    grid = {"client_lr": [0.0, 0.05]}
    with pytest.raises(ValueError, match="never on test"):
        tune(suite, "dp_fedavg", grid, runs_root=tmp_path / "r0", select="next_token.top1", **roots)
    assert not (tmp_path / "r0").exists()

    report, path = tune(suite, "dp_fedavg", grid, runs_root=tmp_path / "r1", **roots)
    values = [c["value"] for c in report["candidates"]]
    assert [c["params"] for c in report["candidates"]] == [{"client_lr": 0.0}, {"client_lr": 0.05}]
    assert report["selected"] == report["candidates"][values.index(max(values))]["params"]
    assert "next_token.top1" not in json.dumps(report)  # no test number in the report
    assert verify_tree(roots["results_root"]) == []
    (record,) = [
        r
        for r in record_files(roots["results_root"])
        if report["candidates"][0]["run_key"] in r.name
    ]
    metrics = json.loads(record.read_text())["spec"]["evaluation"]["metrics"]
    assert [m["name"] for m in metrics] == ["next_token"]  # candidates measure what selects

    # The candidates' records are kept: tuning again on a fresh machine runs nothing.
    shutil.rmtree(tmp_path / "r1")
    again, _ = tune(suite, "dp_fedavg", grid, runs_root=tmp_path / "r2", **roots)
    assert again == report and not (tmp_path / "r2").exists()

    edited = dict(report, selected=report["candidates"][values.index(min(values))]["params"])
    path.write_text(json.dumps(edited))
    assert "tuning report" in dict(verify_tree(roots["results_root"]))[path]
