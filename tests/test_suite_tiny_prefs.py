"""The preference track end to end (paper 003): base_model, dpprefsyn and dp_ft on the
offline chitchat preference pairs (tiny profile) through the real suite path; each entry's
ε is its ledger's, and every release is aligned and scored by win rate, reward accuracy,
PREMIA and the canary audit."""

import math

import pytest

from benchmark.privacy.accountants import epsilon_from_ledger
from benchmark.privacy.ledger import PrivacyLedger
from leaderboard.catalog import SUITES
from leaderboard.client_hits import client_hits_of
from leaderboard.suites import run_suite

pytestmark = pytest.mark.end_to_end  # scheduled first (tests/conftest.py)


@pytest.fixture(scope="module")
def entries(tmp_path_factory):
    root = tmp_path_factory.mktemp("prefs")
    return {
        e["method"]["name"]: e
        for e in run_suite(
            SUITES["tiny_prefs"],
            results_root=root / "results",
            runs_root=root / "runs",
            splits_root=root / "splits",
        )
    }


@pytest.mark.parametrize("method", SUITES["prefs"].methods)
def test_preference_methods_run_and_their_epsilon_is_the_ledgers(entries, method):
    entry = entries[method]
    privacy = entry["privacy"]
    [ledger] = privacy["ledgers"]
    releases = PrivacyLedger.from_json(ledger).releases
    recomputed = epsilon_from_ledger(releases, privacy["delta"], privacy["accountant"])
    assert recomputed == pytest.approx(0.0 if privacy["epsilon"] == "inf" else privacy["epsilon"])
    assert privacy["unit"] == "sample"
    metrics = entry["metrics"]
    assert 0 <= metrics["win_rate.win_rate"]["mean"] <= 1
    assert 0 <= metrics["reward_accuracy.accuracy"]["mean"] <= 1
    # per test tuple, every seed's verdicts: the table's intervals resample the tuples
    for metric in ("win_rate.win_rate", "reward_accuracy.accuracy"):
        _, hits = client_hits_of(entry, metric)
        assert hits.point() == pytest.approx(metrics[metric]["mean"], rel=1e-12)
    premia = entry["audit"]["premia.auc"]  # an audit, beside the other entries' MIA AUC
    assert 0 <= premia["mean"] <= 1 and "premia.auc" not in metrics
    canary = entry["audit"]["canary.epsilon_lower_bound"]["mean"]
    assert 0 <= canary <= entry["audit"]["canary.epsilon_ceiling"]["mean"]
    if method == "base_model":
        assert ledger == [] and entry["method"]["role"] == "bound"
        assert premia["mean"] == 0.5  # the untouched policy: no margin at all
        assert metrics["reward_accuracy.accuracy"]["mean"] == 0.5
    else:
        budget = privacy["epsilon_budget"]
        assert 0.5 * budget <= recomputed <= budget + 1e-9
        assert entry["method"]["role"] == "method"


def test_dpprefsyn_charges_its_cluster_histogram(entries):
    [ledger] = entries["dpprefsyn"]["privacy"]["ledgers"]
    sizes = [r for r in ledger if r["label"] == "cluster_sizes"]
    assert [r["mechanism"] for r in sizes] == ["laplace"] and sizes[0]["epsilon"] > 0
    assert math.isclose(sum(r.get("epsilon", 0) for r in ledger), 4 * (1 / 8 + 1 / 8 + 1 / 16))
