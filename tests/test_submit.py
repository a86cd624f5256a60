"""`fedsynth submit` runs a third-party adapter (the tutorial's docs/tutorials/example_adapter.py)
through a suite; its entries verify and rank."""

import json
import tarfile
from pathlib import Path

from click.testing import CliRunner

from benchmark.cli.main import cli

ADAPTER = str(Path(__file__).parents[1] / "docs" / "tutorials" / "example_adapter.py")


def test_submit_produces_shown_verifiable_entries(tmp_path):
    store = tmp_path / "results"
    bundle = tmp_path / "bundle.tar.gz"
    args = [
        "--results",
        str(store),
        "--runs",
        str(tmp_path / "runs"),
        "--splits",
        str(tmp_path / "splits"),
    ]
    unscheduled = CliRunner().invoke(cli, ["submit", ADAPTER, "--suite", "tiny", *args])
    assert unscheduled.exit_code != 0 and "Missing option '--call-seconds'" in unscheduled.output
    result = CliRunner().invoke(
        cli,
        ["submit", ADAPTER, "--suite", "tiny", "--call-seconds", "12", "--bundle", str(bundle)]
        + args,
    )
    assert result.exit_code == 0, result.output
    assert "method example_public_selection: 1 entries" in result.output

    shown = CliRunner().invoke(
        cli, ["leaderboard", "show", "--results", str(store), "--metric", "fid.fid", "--json"]
    )
    assert shown.exit_code == 0, shown.output
    [table] = json.loads(shown.output)
    [row] = table["rows"]
    # shown, but one seed is never ranked (a cell is ranked only with >= 3 seeds)
    assert row["method"] == "example_public_selection" and not row["eps=1"]["best"]

    verify = ["leaderboard", "verify", "--results", str(store)]
    refused = CliRunner().invoke(cli, verify)  # the submitter's key: not the repository's
    assert refused.exit_code != 0 and "not an accepted key" in refused.output
    verified = CliRunner().invoke(cli, [*verify, "--trust-host"])
    assert verified.exit_code == 0, verified.output

    with tarfile.open(bundle) as tar:
        names = tar.getnames()
    assert any("_manifests/" in n for n in names)
    assert any(n.startswith("_keys/") and n.endswith(".pub") for n in names)  # who signed
    [entry_name] = [n for n in names if "example_public_selection" in n]

    tampered = store / entry_name
    entry = json.loads(tampered.read_text())
    assert entry["spec"]["privacy"]["call_seconds"] == 12  # on the public schedule
    entry["privacy"]["delta"] = 0.5
    tampered.write_text(json.dumps(entry))
    rejected = CliRunner().invoke(cli, [*verify, "--trust-host"])
    assert rejected.exit_code != 0 and "integrity digest mismatch" in rejected.output
