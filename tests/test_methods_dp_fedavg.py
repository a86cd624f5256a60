"""DP-FedAvg: calibration against the accountant, harness noise, clipping, resume, release."""

import math

import pytest
import torch
from model_methods_support import load_params, make_context, make_split, run_rounds

from benchmark.privacy.accountants import epsilon, epsilon_from_ledger
from benchmark.privacy.ledger import SUBSAMPLED_GAUSSIAN
from benchmark.training import flat_params
from methods.dp_fedavg import DPFedAvg, sample_rate

DELTA = 1e-5
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def fedavg(**params):
    return DPFedAvg(DPFedAvg.resolve_config("tiny", params))


def test_ledger_matches_the_accountant_and_the_budget_full_participation(tmp_path):
    ctx = make_context(tmp_path, epsilon=2.0, delta=DELTA)
    method = fedavg(rounds=3)
    state = run_rounds(method, ctx)
    artifact = method.finish(ctx, state)

    releases = ctx.pool.ledger.releases
    sigma = state["noise_multiplier"]
    assert [(r.mechanism, r.sample_rate, r.sensitivity, r.count) for r in releases] == [
        (SUBSAMPLED_GAUSSIAN, 1.0, method.config["clip_norm"], 1)
    ] * 3
    assert {r.noise_multiplier for r in releases} == {sigma}
    eps = epsilon_from_ledger(releases, DELTA)
    assert eps == pytest.approx(epsilon(sigma, 1.0, 3, DELTA))
    assert 0.99 * 2.0 <= eps <= 2.0
    # the release is the best validation round's model, loadable by the evaluator
    assert artifact.kind == "model"
    assert state["best"] is not None and 0 <= state["best"]["round"] < 3
    assert torch.equal(load_params(artifact.model_dir), state["best"]["params"])
    # the per-round validation curve is in the run's diagnostics, the release its best round
    curve = {
        d["round"]: d["value"] for d in ctx.diagnostics.read() if d["name"] == "validation_top1"
    }
    assert sorted(curve) == [0, 1, 2]
    assert curve[state["best"]["round"]] == max(curve.values()) == state["best"]["score"]


def test_poisson_participation_is_accounted_with_its_rate(tmp_path):
    ctx = make_context(tmp_path, epsilon=4.0, delta=DELTA)
    state = run_rounds(fedavg(rounds=2, clients_per_round=2), ctx)
    releases = ctx.pool.ledger.releases
    assert state["sample_rate"] == sample_rate(2, 8) == 2 / 8
    assert {(r.sample_rate, r.sampling) for r in releases} == {(2 / 8, "poisson")}
    eps = epsilon_from_ledger(releases, DELTA)
    assert eps == pytest.approx(epsilon(state["noise_multiplier"], 2 / 8, 2, DELTA))
    assert 0.99 * 4.0 <= eps <= 4.0


def one_round(tmp_path, epsilon, pool_seed=0, split=None, **params):
    """(start, after one round, noise multiplier) of a one-round run."""
    ctx = make_context(tmp_path, epsilon=epsilon, delta=DELTA, pool_seed=pool_seed, split=split)
    method = fedavg(rounds=1, **params)
    state = run_rounds(method, ctx, rounds=[])
    start = state["params"]
    state = run_rounds(method, ctx, state, rounds=[0])
    return start, state["params"], state["noise_multiplier"]


def test_the_only_difference_from_nonprivate_fedavg_is_the_harness_noise(tmp_path):
    config = DPFedAvg.configs["tiny"]
    scale = config["server_lr"] * config["clip_norm"] / 8  # lr · C / (q·N), N = 8, q = 1
    start, exact, zero = one_round(tmp_path, math.inf)
    assert zero == 0.0 and (exact - start).norm() > 0
    noisy = {}
    for eps, pool_seed in ((0.5, 1), (0.5, 2), (1000.0, 1)):
        _, params, sigma = one_round(tmp_path, eps, pool_seed=pool_seed)
        noise = (params - exact) / scale  # same clients, same local training: noise only
        # i.i.d. N(0, σ²) per coordinate, σ as calibrated for this ε
        assert noise.std().item() == pytest.approx(sigma, rel=0.02)
        assert abs(noise.mean().item()) < 0.02 * sigma
        noisy[eps, pool_seed] = params
    # small ε: the noise swamps the update and changes with the harness's noise seed
    assert not torch.allclose(noisy[0.5, 1], noisy[0.5, 2])
    assert (noisy[0.5, 1] - exact).norm() > 10 * (exact - start).norm()
    # very large ε: close to non-private FedAvg
    assert (noisy[1000.0, 1] - exact).norm() < 0.01 * (noisy[0.5, 1] - exact).norm()


def test_clipping_bounds_each_clients_influence(tmp_path):
    # noise off (ε = ∞), client lr so large that every delta is far beyond the clip norm
    clip, server_lr = 1e-3, 0.5
    for n_clients in (1, 4):
        split = make_split(n_clients=n_clients)
        start, end, _ = one_round(
            tmp_path, math.inf, split=split, client_lr=1.0, clip_norm=clip, server_lr=server_lr
        )
        step = (end - start).norm().item()
        # the server step is server_lr · (Σ clipped deltas) / N, each clipped delta of norm C
        assert step <= server_lr * clip * (1 + 1e-4)
        if n_clients == 1:
            assert step == pytest.approx(server_lr * clip, rel=1e-4)
    start, end, _ = one_round(
        tmp_path,
        math.inf,
        split=make_split(n_clients=1),
        client_lr=1.0,
        clip_norm=1e6,
        server_lr=server_lr,
    )
    assert (end - start).norm() > 100 * clip


def test_a_resumed_run_matches_an_uninterrupted_one(tmp_path):
    ctx = make_context(tmp_path / "a", epsilon=2.0, delta=DELTA)
    straight = run_rounds(fedavg(rounds=2), ctx)

    ctx = make_context(tmp_path / "b", epsilon=2.0, delta=DELTA)
    first = run_rounds(fedavg(rounds=2), ctx, rounds=[0])
    torch.save({"state": first, "pool": ctx.pool.state_dict()}, tmp_path / "ckpt.pt")
    saved = torch.load(tmp_path / "ckpt.pt", weights_only=False)
    resumed_ctx = make_context(tmp_path / "b", epsilon=2.0, delta=DELTA)
    resumed_ctx.pool.load_state_dict(saved["pool"])
    resumed_ctx.pool.ledger.releases[:] = ctx.pool.ledger.releases
    resumed = run_rounds(fedavg(rounds=2), resumed_ctx, saved["state"], rounds=[1])

    assert torch.equal(resumed["params"], straight["params"])
    assert torch.equal(resumed["momentum"], straight["momentum"])


def test_server_momentum_carries_the_previous_update(tmp_path):
    def two_rounds(beta):
        ctx = make_context(tmp_path, epsilon=math.inf)
        method = fedavg(rounds=2, server_momentum=beta)
        state = run_rounds(method, ctx, rounds=[])
        trajectory = [state["params"]]
        for r in range(2):
            state = run_rounds(method, ctx, state, rounds=[r])
            trajectory.append(state["params"])
        return trajectory

    start, first, heavy = two_rounds(0.9)
    _, first_plain, plain = two_rounds(0.0)
    assert torch.equal(first, first_plain)  # m₁ = Δ̄₁ whatever β
    # same Δ̄₂ (same θ₁, same seeds): θ₂(β) − θ₂(0) = lr · β · Δ̄₁ = β (θ₁ − θ₀)
    assert torch.allclose(heavy - plain, 0.9 * (first - start), atol=1e-6)
    assert (first - start).norm() > 0


def test_client_training_never_writes_to_the_servers_model(tmp_path):
    # no validation scoring, so nothing on the server side reloads the server's model
    ctx = make_context(tmp_path, epsilon=2.0, delta=DELTA)
    method = fedavg(rounds=1, select_every=0)
    state = run_rounds(method, ctx, rounds=[])
    start = state["params"]
    state = run_rounds(method, ctx, state, rounds=[0])
    assert method.trainer(ctx).model is not method.model(ctx)
    # the server's model object still holds the (public) state it was given, not the last
    # client's locally trained weights; the clients did train and the server did step
    assert torch.equal(flat_params(method.model(ctx)), start)
    last_client = flat_params(method.trainer(ctx).model)
    assert not torch.equal(last_client, start) and not torch.equal(state["params"], start)
    # releasing loads the state's parameters into the server model, never the client's
    method.finish(ctx, state)
    assert torch.equal(flat_params(method.model(ctx)), state["params"])
