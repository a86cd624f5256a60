"""Every published adapter runs on the KJV split (tiny profile) through the real suite path,
each entry's ε is the accountant's ε of its own ledger, within its budget, and every
release (texts or model) gets next-token accuracy, FID and the canary audit."""

import dataclasses
import math

import pytest

from benchmark.privacy.accountants import epsilon_from_ledger
from benchmark.privacy.ledger import PrivacyLedger
from leaderboard.catalog import SUITES
from leaderboard.schema import EntryError
from leaderboard.suites import run_suite

pytestmark = pytest.mark.end_to_end  # scheduled first (tests/conftest.py)


@pytest.fixture(scope="module")
def entries(tmp_path_factory):
    root = tmp_path_factory.mktemp("suite")
    metrics = (
        {"name": "next_token", "settings": {}},
        {"name": "fid", "settings": {}},
        {"name": "canary", "settings": {}},
    )
    suite = dataclasses.replace(SUITES["tiny"], metrics=metrics)
    return {
        e["method"]["name"]: e
        for e in run_suite(
            suite,
            results_root=root / "results",
            runs_root=root / "runs",
            splits_root=root / "splits",
        )
    }


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
