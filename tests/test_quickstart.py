"""`fedsynth quickstart` (what `make run` calls) end to end on the tiny suite, then a
submission ranked beside the published methods in the same leaderboard version."""

import json

from click.testing import CliRunner

from benchmark.cli.main import cli
from leaderboard.suites import PUBLISHED_METHODS

ADAPTER = __file__.replace("test_quickstart.py", "example_adapter.py")


def table(output: str) -> list[str]:
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if "(higher is better)" in line)
    end = next(i for i, line in enumerate(lines) if line.startswith("site:"))
    return lines[start:end]


def test_quickstart_prints_the_table_writes_the_site_and_ranks_a_submission(tmp_path):
    store = [
        *("--results", str(tmp_path / "results")),
        *("--runs", str(tmp_path / "runs")),
        *("--splits", str(tmp_path / "splits")),
    ]
    site = tmp_path / "site"
    result = CliRunner().invoke(cli, ["quickstart", "--suite", "tiny", *store, "--site", str(site)])
    assert result.exit_code == 0, result.output
    assert "next_token.top1 (higher is better)" in result.output
    printed = {line.split()[0] for line in result.output.splitlines() if line.strip()}
    assert set(PUBLISHED_METHODS) <= printed
    assert (site / "index.html").exists() and "quickstart finished in" in result.output

    again = CliRunner().invoke(cli, ["quickstart", "--suite", "tiny", *store, "--site", str(site)])
    assert (
        again.exit_code == 0
        and again.output.splitlines()[-3:-1] == result.output.splitlines()[-3:-1]
    )

    submitted = CliRunner().invoke(cli, ["submit", ADAPTER, "--suite", "tiny", *store[:6],
                                         "--bundle", str(tmp_path / "b.tar.gz")])  # fmt: skip
    assert submitted.exit_code == 0, submitted.output
    shown = CliRunner().invoke(cli, ["leaderboard", "show", *store[:2], "--json"])
    [table] = json.loads(shown.output)
    assert {r["method"] for r in table["rows"]} == {*PUBLISHED_METHODS, "example_public_selection"}
    verified = CliRunner().invoke(cli, ["leaderboard", "verify", *store[:2]])
    assert verified.exit_code == 0 and "all 8 entries verified" in verified.output
