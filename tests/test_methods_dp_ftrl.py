"""DP-FTRL: tree-aggregation prefix sums, TreeRestart (accounting and the restart rule),
calibration anchors, resume."""

import math

import numpy as np
import pytest
import torch
from model_methods_support import load_params, make_context, make_split, run_rounds

from benchmark.data import group_by_client
from benchmark.federation.pool import ClientPool
from benchmark.privacy.accountants import epsilon, epsilon_from_ledger
from benchmark.privacy.ledger import NONPRIVATE, TREE_AGGREGATION, PrivacyLedger, Release
from benchmark.spec import SpecError
from methods.dp_ftrl import CROSS_DEVICE_002, DPFTRL, ftrl_noise, tree_schedule

DELTA = 1e-5
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def ftrl(**params):
    return DPFTRL(DPFTRL.resolve_config("tiny", params))


def test_restarted_trees_are_accounted_and_fit_the_budget(tmp_path):
    ctx = make_context(tmp_path, epsilon=2.0, delta=DELTA)
    method = ftrl(rounds=6, cohort_size=2)  # 8 clients: a 4-leaf tree, then the 2 rounds left
    state = run_rounds(method, ctx)
    artifact = method.finish(ctx, state)

    sigma = state["noise_multiplier"]
    assert state["trees"] == [4, 2]
    releases = ctx.pool.ledger.releases
    assert [(r.mechanism, r.label, r.count, r.sensitivity) for r in releases] == [
        (TREE_AGGREGATION, "dp_ftrl/tree0", 4, method.config["clip_norm"]),
        (TREE_AGGREGATION, "dp_ftrl/tree1", 2, method.config["clip_norm"]),
    ]
    assert {r.noise_multiplier for r in releases} == {sigma}
    eps = epsilon_from_ledger(releases, DELTA)
    # 3 + 2 tree levels at σ account like the 4-leaf tree's 3 levels at σ·√(3/5)
    assert eps == pytest.approx(
        epsilon(sigma * math.sqrt(3 / 5), 1.0, 4, DELTA, mechanism="tree_aggregation")
    )
    assert 0.99 * 2.0 <= eps <= 2.0 + 1e-9
    assert artifact.kind == "model"
    assert torch.equal(load_params(artifact.model_dir), state["best"]["params"])


def test_a_short_run_opens_one_tree_of_exactly_its_rounds(tmp_path):
    ctx = make_context(tmp_path, epsilon=2.0, delta=DELTA)
    state = run_rounds(ftrl(rounds=3, cohort_size=2), ctx)  # ⌊8 / 2⌋ = 4 > 3 rounds
    releases = ctx.pool.ledger.releases
    assert state["trees"] == [3]
    assert [(r.mechanism, r.count) for r in releases] == [(TREE_AGGREGATION, 3)]
    eps = epsilon_from_ledger(releases, DELTA)
    assert eps == pytest.approx(
        epsilon(state["noise_multiplier"], 1.0, 3, DELTA, mechanism="tree_aggregation")
    )
    assert 0.99 * 2.0 <= eps <= 2.0 + 1e-9


def test_every_client_cohorts_take_each_client_of_the_run_once(tmp_path):
    """8 clients, 3 rounds: c = ⌊8 / 3⌋ = 2, and the one tree's 3 cohorts hold all 8."""
    ctx = make_context(tmp_path, epsilon=2.0, delta=DELTA)
    state = run_rounds(ftrl(rounds=3, cohort_size="every_client"), ctx)
    assert state["cohort_size"] == 2 and state["trees"] == [3]
    cohorts = ctx.pool._trees["dp_ftrl/tree0"].cohorts
    assert sorted(len(c) for c in cohorts) == [2, 3, 3]
    assert sorted(i for c in cohorts for i in c) == list(range(8))


def test_ftrl_iterates_and_tree_restart(tmp_path):
    """With a fixed client update v (norm 2C, so clipped to C): within a tree
    mₜ = β mₜ₋₁ + Sₜ / c and θₜ₊₁ = θ_a + η mₜ (Sₜ the pool's noisy prefix sum); at a restart
    the anchor θ_a becomes θ and the momentum restarts from zero (Kairouz et al.)."""
    beta, lr, c = 0.5, 0.7, 2
    ctx = make_context(tmp_path, epsilon=2.0, delta=DELTA)
    method = ftrl(rounds=6, cohort_size=c, server_momentum=beta, server_lr=lr, clip_norm=1.0)
    state = run_rounds(method, ctx, rounds=[])
    dim = state["params"].numel()
    v = np.zeros(dim)
    v[:2] = [1.2, 1.6]  # norm 2

    method.trainer = lambda ctx: lambda client, payload: v
    sigma = state["noise_multiplier"]

    twin = ClientPool(
        group_by_client(make_split().records("train")), ledger=PrivacyLedger(), seed=0
    )
    anchor, momentum = state["params"].double().numpy(), np.zeros(dim)
    trees = [4, 2]
    for r in range(6):
        state = run_rounds(method, ctx, state, rounds=[r])
        tree, leaf = divmod(r, 4)
        if leaf == 0:
            twin.open_tree(
                f"t{tree}",
                dim=dim,
                clip_norm=1.0,
                noise_multiplier=sigma,
                cohort_size=c,
                max_leaves=trees[tree],
            )
        noise_prefix = twin.tree_step(f"t{tree}", lambda client, payload: np.zeros(dim))
        momentum = beta * momentum + ((leaf + 1) * c * v / 2 + noise_prefix) / c
        expected = anchor + lr * momentum
        assert torch.allclose(state["params"].double(), torch.from_numpy(expected), atol=1e-4)
        assert np.linalg.norm(noise_prefix) > 1.0  # the noise is really there
        if leaf + 1 == trees[tree]:  # tree used up: restart
            assert torch.equal(state["start"], state["params"]) and not state["momentum"].any()
            anchor, momentum = expected, np.zeros(dim)
        else:
            assert state["momentum"].any()


def test_full_participation_is_one_leaf_tree_per_round(tmp_path):
    ctx = make_context(tmp_path, epsilon=2.0, delta=DELTA)
    state = run_rounds(ftrl(rounds=3, cohort_size=None), ctx)
    releases = ctx.pool.ledger.releases
    assert [(r.mechanism, r.count) for r in releases] == [(TREE_AGGREGATION, 1)] * 3
    assert state["cohort_size"] == 8 and state["trees"] == [1, 1, 1]
    # every round restarts: no momentum survives a round (DP-FedAvg without server momentum)
    assert not state["momentum"].any() and torch.equal(state["start"], state["params"])
    eps = epsilon_from_ledger(releases, DELTA)
    # a one-leaf tree is one Gaussian release: same ε as 3 full-participation DP-FedAvg rounds
    assert eps == pytest.approx(epsilon(state["noise_multiplier"], 1.0, 3, DELTA))
    assert 0.99 * 2.0 <= eps <= 2.0 + 1e-9


@pytest.mark.parametrize("num_clients", [160_000, 342_477])
def test_paper_002_noise_multipliers_are_reproduced(tmp_path, num_clients):
    # T = 1600 rounds of 100 disjoint clients, δ = 1e-6 (paper 002 §2): one 1600-leaf tree
    # whatever N ≥ 160,000 (never ⌊N/100⌋ leaves, which would add a tree level above 204,800)
    c, trees = tree_schedule(num_clients, CROSS_DEVICE_002["cohort_size"], 1600)
    assert (c, trees) == (100, [1600])
    # the ledger the adapter's pool records for these trees at m = 8.83 gives ε = 1.77
    ledger = [Release(TREE_AGGREGATION, 8.83, 0.3, 1.0, n, f"t{i}") for i, n in enumerate(trees)]
    assert epsilon_from_ledger(ledger, 1e-6) == pytest.approx(1.773, abs=1e-3)
    for eps, sigma in ((1.7732, 8.83), (18.7096, 1.13)):  # ε of 8.83 / 1.13 (spec 3.1)
        ctx = make_context(tmp_path, epsilon=eps, delta=1e-6)
        assert ftrl_noise(ctx, trees) == pytest.approx(sigma, abs=2e-3)


def test_tree_schedule_restarts_and_caps_the_last_tree():
    assert tree_schedule(1600, 2, 1600) == (2, [800, 800])  # a restart: two passes
    assert tree_schedule(10, 2, 7) == (2, [5, 2])  # the last tree holds the rounds left
    assert tree_schedule(10, 3, 2) == (3, [2])  # ⌊10 / 3⌋ = 3 leaves capped at 2 rounds
    assert tree_schedule(5, None, 3) == (5, [1, 1, 1])
    with pytest.raises(SpecError, match="cohort_size"):
        tree_schedule(5, 6, 3)


def test_infinite_budget_runs_without_trees_and_is_nonprivate(tmp_path):
    ctx = make_context(tmp_path, epsilon=math.inf)
    method = ftrl(rounds=2, cohort_size=4)
    state = run_rounds(method, ctx, rounds=[])
    start = state["params"]
    state = run_rounds(method, ctx, state, rounds=[0, 1])
    releases = ctx.pool.ledger.releases
    assert [(r.mechanism, r.sample_rate) for r in releases] == [(NONPRIVATE, 0.5)] * 2
    assert math.isinf(epsilon_from_ledger(releases, DELTA))
    assert (state["params"] - start).norm() > 0


def test_a_resumed_run_matches_an_uninterrupted_one(tmp_path):
    ctx = make_context(tmp_path / "a", epsilon=2.0, delta=DELTA)
    straight = run_rounds(ftrl(rounds=3, cohort_size=4), ctx)

    ctx = make_context(tmp_path / "b", epsilon=2.0, delta=DELTA)
    first = run_rounds(ftrl(rounds=3, cohort_size=4), ctx, rounds=[0, 1])  # trees [2, 1]
    torch.save({"state": first, "pool": ctx.pool.state_dict()}, tmp_path / "ckpt.pt")
    saved = torch.load(tmp_path / "ckpt.pt", weights_only=False)
    resumed_ctx = make_context(tmp_path / "b", epsilon=2.0, delta=DELTA)
    resumed_ctx.pool.load_state_dict(saved["pool"])
    resumed = run_rounds(ftrl(rounds=3, cohort_size=4), resumed_ctx, saved["state"], rounds=[2])

    assert torch.equal(resumed["params"], straight["params"])
    assert torch.equal(resumed["momentum"], straight["momentum"])
    assert torch.equal(resumed["start"], straight["start"])


def test_tree_accounting_needs_the_rdp_accountant(tmp_path):
    ctx = make_context(tmp_path, epsilon=2.0, delta=DELTA, accountant="prv")
    with pytest.raises(SpecError, match="rdp"):
        run_rounds(ftrl(), ctx)
