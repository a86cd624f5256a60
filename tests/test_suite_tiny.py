"""Every published adapter runs on the KJV split (tiny profile) through the real suite path,
each entry's ε is the accountant's ε of its own ledger, within its budget, and every
release (texts or model) gets next-token accuracy, FID and the canary audit. Then
`fedsynth quickstart` (what `make run` calls) on those runs, and a submission ranked beside
the published methods in the same leaderboard version. The suite runs once, for both: the
quickstart calls the same ``run_suite`` and finds the runs finished."""

import json
import math
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from benchmark.cli.main import cli
from benchmark.privacy.accountants import epsilon_from_ledger
from benchmark.privacy.ledger import PrivacyLedger
from leaderboard.catalog import SUITES
from leaderboard.schema import EntryError
from leaderboard.suites import run_suite

pytestmark = pytest.mark.end_to_end  # scheduled first (tests/conftest.py)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """The tiny suite run once for this module: its root (results, runs, splits) and its
    entries by method. The quickstart test below starts from a copy of its runs."""
    root = tmp_path_factory.mktemp("suite")
    got = run_suite(
        SUITES["tiny"],
        results_root=root / "results",
        runs_root=root / "runs",
        splits_root=root / "splits",
    )
    return root, {e["method"]["name"]: e for e in got}


@pytest.fixture(scope="module")
def entries(tiny_run):
    return tiny_run[1]


@pytest.mark.parametrize("method", SUITES["quick"].methods)
def test_adapter_runs_on_kjv_and_its_epsilon_is_the_ledgers(entries, method):
    entry = entries[method]
    privacy = entry["privacy"]
    [ledger] = privacy["ledgers"]
    recomputed = epsilon_from_ledger(
        PrivacyLedger.from_json(ledger).releases, privacy["delta"], privacy["accountant"]
    )
    claimed = math.inf if privacy["epsilon"] == "inf" else privacy["epsilon"]
    budget = math.inf if privacy["epsilon_budget"] == "inf" else privacy["epsilon_budget"]
    assert recomputed == pytest.approx(claimed)
    assert recomputed <= budget + 1e-9
    if method == "public_only":
        assert ledger == [] and claimed == 0
    elif method in ("nonprivate", "oracle"):
        assert math.isinf(claimed)
    else:  # DP methods spend (almost all of) their budget through harness releases
        assert 0.9 * budget <= recomputed and all(r["noise_multiplier"] > 0 for r in ledger)
    assert 0 < entry["metrics"]["next_token.top1"]["mean"] < 1
    # model releases are scored on texts sampled from the released model
    assert math.isfinite(entry["metrics"]["fid.fid"]["mean"])
    assert entry["contamination"]["verdict"] == "contaminated"  # KJV is a demo corpus
    # every entry carries the canary audit's ε lower bound, within what its canaries allow
    audit = entry["audit"]
    assert audit["canary.canaries"]["mean"] >= 10
    bound, ceiling = audit["canary.epsilon_lower_bound"], audit["canary.epsilon_ceiling"]
    assert all(0 <= b <= c + 1e-9 for b, c in zip(bound["values"], ceiling["values"], strict=True))
    expected_role = {"public_only": "bound", "nonprivate": "bound", "oracle": "control"}
    assert entry["method"]["role"] == expected_role.get(method, "method")


def test_generator_only_runs_in_the_tiny_suite_as_an_eps_0_control_with_paired_hits(entries):
    """Issue 32's control: no release in its ledger (ε = 0), a text release scored like
    every other, and the per-client hits the paired intervals need, in its entry."""
    entry = entries["generator_only"]
    assert entry["privacy"]["ledgers"] == [[]] and entry["privacy"]["epsilon"] == 0
    assert entry["method"]["role"] == "control"
    assert 0 < entry["metrics"]["next_token.top1"]["mean"] < 1
    test = entry["per_client"]["next_token"]["test"]
    assert (
        sum(test["top1_hits"][0]) / sum(test["tokens"])
        == (entry["metrics"]["next_token.top1"]["values"][0])
    )
    assert "validation" in entry["per_client"]["next_token"]


def test_fed_ctg_runs_in_the_tiny_suite_with_each_client_groups_epsilon(entries):
    """Paper 001's sample-level unit: the entry names it, shows the strong and weak groups'
    ε, reports the worst, and `leaderboard verify`'s check recomputes all of them."""
    from leaderboard.verify import check_entry

    privacy = entries["fed_ctg"]["privacy"]
    assert privacy["unit"] == "client_sample"
    groups = privacy["group_epsilons"]
    assert set(groups) == {"strong", "weak"}
    assert privacy["epsilon"] == pytest.approx(max(groups.values()))
    assert max(groups.values()) <= privacy["epsilon_budget"] + 1e-9
    check_entry(entries["fed_ctg"])
    forged = {
        **entries["fed_ctg"],
        "privacy": {**privacy, "group_epsilons": {**groups, "weak": 0.1}},
    }
    with pytest.raises(EntryError, match="weak"):
        check_entry(forged)


def test_dp_ftrl_dm_runs_in_the_tiny_suite_as_one_tree_and_is_not_ranked_by_next_token(entries):
    """Paper 002's Algorithm 1 end to end: the mid-training pause leaves the ledger one
    DP-FTRL tree; the released LSTM names the public LLM's vocabulary, so the ranked
    next-token metric (the instrument's vocabulary) skips it while FID still scores it."""
    entry = entries["dp_ftrl_dm"]
    [ledger] = entry["privacy"]["ledgers"]
    assert [(r["mechanism"], r["count"]) for r in ledger] == [("tree_aggregation", 4)]
    assert entry["privacy"]["epsilon"] <= entry["privacy"]["epsilon_budget"] + 1e-9
    assert "next_token.top1" not in entry["metrics"]
    assert math.isfinite(entry["metrics"]["fid.fid"]["mean"])


PUBLISHED_METHODS = SUITES["quick"].methods
ADAPTER = str(Path(__file__).parents[1] / "docs" / "tutorials" / "example_adapter.py")


def tree_bytes(root):
    return {p: p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_quickstart_prints_the_table_writes_the_site_and_ranks_a_submission(tiny_run, tmp_path):
    shutil.copytree(tiny_run[0] / "runs", tmp_path / "runs")  # finished: not run again
    published = tmp_path / "published"
    store = [
        *("--results", str(tmp_path / "results")),
        *("--runs", str(tmp_path / "runs")),
        *("--splits", str(tiny_run[0] / "splits")),
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
                                         "--call-seconds", "15",
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
