"""`fedsynth quickstart` (what `make run` calls) end to end on the tiny suite, then a
submission ranked beside the published methods in the same leaderboard version."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from benchmark.cli.main import cli
from leaderboard.catalog import SUITES

PUBLISHED_METHODS = SUITES["quick"].methods

pytestmark = pytest.mark.end_to_end  # scheduled first (tests/conftest.py)

ADAPTER = str(Path(__file__).parents[1] / "docs" / "tutorials" / "example_adapter.py")


def tree_bytes(root):
    return {p: p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_quickstart_prints_the_table_writes_the_site_and_ranks_a_submission(tmp_path):
    published = tmp_path / "published"
    store = [
        *("--results", str(tmp_path / "results")),
        *("--runs", str(tmp_path / "runs")),
        *("--splits", str(tmp_path / "splits")),
        *("--published", str(published)),
    ]
    site = tmp_path / "site"
    nothing_published = ("--published", str(tmp_path / "empty"))  # not the checkout's results/
    first = CliRunner().invoke(
        cli, ["quickstart", "--suite", "tiny", *store[:6], *nothing_published, "--site", str(site)]
    )
    assert first.exit_code == 0, first.output
    # the user's first run becomes "the published store" of the next one; a second user's
    # quickstart then writes only to its own store, and shows the published rows beside.
    (tmp_path / "results").rename(published)
    before = tree_bytes(published)
    result = CliRunner().invoke(cli, ["quickstart", "--suite", "tiny", *store, "--site", str(site)])
    assert result.exit_code == 0, result.output
    assert tree_bytes(published) == before  # published entries and manifests untouched
    assert result.output.startswith("quickstart: the tiny suite, 11 runs")  # what is coming
    assert "next-token top-1 ↑" in result.output
    printed = {tuple(line.split()[:2]) for line in result.output.splitlines() if line.strip()}
    assert {(m, "(yours)") for m in PUBLISHED_METHODS} <= printed  # yours, marked
    assert set(PUBLISHED_METHODS) <= {m for m, _ in printed}  # beside the published rows
    assert ("oracle", "control") in printed and ("oracle", "(yours)") in printed
    assert (site / "index.html").exists() and "quickstart finished in" in result.output
    assert "oracle (yours)" in (site / "index.html").read_text()

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
    assert {r["method"] for r in table["rows"]} == {
        *PUBLISHED_METHODS,
        "fed_ctg [client_sample]",  # paper 001's sample-level unit: shown apart, not ranked
        "generator_only",  # the ε = 0 control of the LLM methods
        "example_public_selection",
    }  # dp_ftrl_dm's model names another vocabulary: no next_token row, an entry all the same
    roles = {r["method"]: r["role"] for r in table["rows"]}
    assert roles["oracle"] == roles["generator_only"] == "control"
    assert roles["public_only"] == "bound"
    mine = CliRunner().invoke(
        cli, ["leaderboard", "show", "--results", str(published), "--mine", store[1], "--json"]
    )
    [both] = json.loads(mine.output)
    assert "example_public_selection (yours)" in {r["method"] for r in both["rows"]}
    verified = CliRunner().invoke(cli, ["leaderboard", "verify", *store[:2], "--trust-host"])
    assert verified.exit_code == 0 and "all 12 entries verified" in verified.output
