"""DP-FTRL: tree-aggregation prefix sums, TreeRestart accounting, calibration anchors, resume."""

import math

import numpy as np
import pytest
import torch
from model_methods_support import (
    load_params,
    make_context,
    make_split,
    run_rounds,
    torch_threads,
)

from benchmark.data import group_by_client
from benchmark.federation.pool import ClientPool
from benchmark.privacy.accountants import epsilon, epsilon_from_ledger
from benchmark.privacy.ledger import NONPRIVATE, TREE_AGGREGATION, PrivacyLedger
from benchmark.spec import SpecError
from methods.dp_ftrl import CROSS_DEVICE_002, DPFTRL, ftrl_noise, tree_schedule

DELTA = 1e-5


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    with torch_threads(1):
        yield


def ftrl(**params):
    return DPFTRL(DPFTRL.resolve_config("tiny", params))


def test_restarted_trees_are_accounted_and_fit_the_budget(tmp_path):
    ctx = make_context(tmp_path, epsilon=2.0, delta=DELTA)
    method = ftrl(rounds=6, cohort_size=2)  # 8 clients: 4 leaves per tree, 2 trees
    state = run_rounds(method, ctx)
    artifact = method.finish(ctx, state)

    sigma = state["noise_multiplier"]
    releases = ctx.pool.ledger.releases
    assert [(r.mechanism, r.label, r.count, r.sensitivity) for r in releases] == [
        (TREE_AGGREGATION, "dp_ftrl/tree0", 4, method.config["clip_norm"]),
        (TREE_AGGREGATION, "dp_ftrl/tree1", 4, method.config["clip_norm"]),
    ]
    eps = epsilon_from_ledger(releases, DELTA)
    # two trees at σ account like one tree at σ/√2
    assert eps == pytest.approx(
        epsilon(sigma / math.sqrt(2), 1.0, 4, DELTA, mechanism="tree_aggregation")
    )
    assert 0.99 * 2.0 <= eps <= 2.0 + 1e-9
    assert artifact.kind == "model"
    assert torch.equal(load_params(artifact.model_dir), state["best"]["params"])


def test_ftrl_iterates_are_the_start_plus_the_trees_noisy_prefix_sums(tmp_path):
    """With a fixed client update v (norm 2C, so clipped to C), no momentum and lr 1,
    θₜ = θ₀ + Sₜ / c where Sₜ is the pool's noisy running sum across restarted trees."""
    ctx = make_context(tmp_path, epsilon=2.0, delta=DELTA)
    method = ftrl(rounds=6, cohort_size=2, server_momentum=0.0, server_lr=1.0, clip_norm=1.0)
    state = run_rounds(method, ctx, rounds=[])
    dim = state["params"].numel()
    v = np.zeros(dim)
    v[:2] = [1.2, 1.6]  # norm 2

    method.trainer = lambda ctx: lambda client, payload: v
    start, sigma = state["params"], state["noise_multiplier"]

    twin = ClientPool(
        group_by_client(make_split().records("train")), ledger=PrivacyLedger(), seed=0
    )
    completed, clipped = np.zeros(dim), v / 2
    for r in range(6):
        state = run_rounds(method, ctx, state, rounds=[r])
        tree, leaf = divmod(r, 4)
        if leaf == 0:
            twin.open_tree(
                f"t{tree}", dim=dim, clip_norm=1.0, noise_multiplier=sigma, cohort_size=2
            )
        noise_prefix = twin.tree_step(f"t{tree}", lambda client, payload: np.zeros(dim))
        expected = start.double().numpy() + (r + 1) * clipped + (completed + noise_prefix) / 2
        assert torch.allclose(state["params"].double(), torch.from_numpy(expected), atol=1e-4)
        if leaf == 3:
            completed = completed + noise_prefix
    assert np.linalg.norm(completed) > 1.0  # the noise is really there (σC√dim / c ≫ 1)


def test_full_participation_is_one_leaf_tree_per_round(tmp_path):
    ctx = make_context(tmp_path, epsilon=2.0, delta=DELTA)
    state = run_rounds(ftrl(rounds=3, cohort_size=None), ctx)
    releases = ctx.pool.ledger.releases
    assert [(r.mechanism, r.count) for r in releases] == [(TREE_AGGREGATION, 1)] * 3
    assert state["cohort_size"] == 8 and state["leaves"] == 1
    eps = epsilon_from_ledger(releases, DELTA)
    # a one-leaf tree is one Gaussian release: same ε as 3 full-participation DP-FedAvg rounds
    assert eps == pytest.approx(epsilon(state["noise_multiplier"], 1.0, 3, DELTA))
    assert 0.99 * 2.0 <= eps <= 2.0 + 1e-9


def test_paper_002_noise_multipliers_are_reproduced(tmp_path):
    # T = 1600 rounds of 100 disjoint clients, one tree, δ = 1e-6 (paper 002 §2)
    c, leaves, trees = tree_schedule(160_000, CROSS_DEVICE_002["cohort_size"], 1600)
    assert (c, leaves, trees) == (100, 1600, 1)
    for eps, sigma in ((1.7732, 8.83), (18.7096, 1.13)):  # ε of 8.83 / 1.13 (spec 3.1)
        ctx = make_context(tmp_path, epsilon=eps, delta=1e-6)
        assert ftrl_noise(ctx, leaves, trees) == pytest.approx(sigma, abs=2e-3)
    # a restart halves each tree and composes two of them
    assert tree_schedule(1600, 2, 1600) == (2, 800, 2)


def test_infinite_budget_runs_without_trees_and_is_nonprivate(tmp_path):
    ctx = make_context(tmp_path, epsilon=math.inf)
    state = run_rounds(ftrl(rounds=2, cohort_size=4), ctx)
    releases = ctx.pool.ledger.releases
    assert [(r.mechanism, r.sample_rate) for r in releases] == [(NONPRIVATE, 0.5)] * 2
    assert math.isinf(epsilon_from_ledger(releases, DELTA))
    assert (state["params"] - state["start"]).norm() > 0


def test_a_resumed_run_matches_an_uninterrupted_one(tmp_path):
    ctx = make_context(tmp_path / "a", epsilon=2.0, delta=DELTA)
    straight = run_rounds(ftrl(rounds=3, cohort_size=2), ctx)

    ctx = make_context(tmp_path / "b", epsilon=2.0, delta=DELTA)
    first = run_rounds(ftrl(rounds=3, cohort_size=2), ctx, rounds=[0, 1])
    torch.save({"state": first, "pool": ctx.pool.state_dict()}, tmp_path / "ckpt.pt")
    saved = torch.load(tmp_path / "ckpt.pt", weights_only=False)
    resumed_ctx = make_context(tmp_path / "b", epsilon=2.0, delta=DELTA)
    resumed_ctx.pool.load_state_dict(saved["pool"])
    resumed = run_rounds(ftrl(rounds=3, cohort_size=2), resumed_ctx, saved["state"], rounds=[2])

    assert torch.equal(resumed["params"], straight["params"])
    assert torch.equal(resumed["momentum"], straight["momentum"])


def test_tree_accounting_needs_the_rdp_accountant(tmp_path):
    ctx = make_context(tmp_path, epsilon=2.0, delta=DELTA, accountant="prv")
    with pytest.raises(SpecError, match="rdp"):
        run_rounds(ftrl(), ctx)
