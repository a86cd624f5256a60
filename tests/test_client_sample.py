"""Paper 001's accounting and the client_sample pool mechanisms (issue 12, items 2-3)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from benchmark.federation.clients import ClientBatch
from benchmark.federation.pool import ClientPool
from benchmark.privacy.accountants import (
    analytic_gaussian_sigma,
    epsilon_from_ledger,
    group_epsilons,
    noise_multiplier_for,
)
from benchmark.privacy.errors import PrivacyError
from benchmark.privacy.ledger import PrivacyLedger, Release

YELP_DELTA = 1 / (2 * 100 * math.log(100))  # δ per phase, N = 100, natural log
PUBMED_DELTA = 1 / (2 * 20 * math.log(20))


@pytest.mark.parametrize(
    ("epsilon", "delta", "sensitivity", "sigma"),
    [
        (2.0, YELP_DELTA, 1.0, 1.434),
        (1.0, YELP_DELTA, 1.0, 2.551),
        (6.0, YELP_DELTA, 1.0, 0.595),
        (6.0, YELP_DELTA, math.sqrt(5), 1.331),
        (3.0, YELP_DELTA, math.sqrt(5), 2.304),
        (2.0, PUBMED_DELTA, 1.0, 1.144),
        (6.0, PUBMED_DELTA, math.sqrt(3), 0.880),
    ],
)
def test_analytic_gaussian_sigma_matches_the_derived_table(epsilon, delta, sensitivity, sigma):
    """seeds-001-002.md §3.2 (three decimals)."""
    assert analytic_gaussian_sigma(epsilon, delta, sensitivity) == pytest.approx(sigma, abs=6e-4)


@pytest.mark.parametrize(
    ("q", "steps", "delta", "epsilon", "sigma"),
    [
        (256 / 15000, 10000, YELP_DELTA, 6.0, 1.31),  # Yelp GPT-2
        (256 / 15000, 10000, YELP_DELTA, 3.0, 2.08),
        (256 / 2250, 1000, PUBMED_DELTA, 6.0, 2.20),  # PubMed GPT-2-large
        (256 / 2250, 1000, PUBMED_DELTA, 3.0, 3.57),
        (64 / 15000, 2500, YELP_DELTA, 6.0, 0.55),  # Yelp LLaMA-7B (ours: 0.533)
        (64 / 15000, 2500, YELP_DELTA, 3.0, 0.65),
    ],
)
def test_dp_sgd_noise_multipliers_match_the_derived_table(q, steps, delta, epsilon, sigma):
    """seeds-001-002.md §3.3 (RDP; the table gives "≈" values at two decimals): within
    0.02 or 3 %, whichever is larger."""
    got = noise_multiplier_for(epsilon, delta, q, steps)
    assert got == pytest.approx(sigma, rel=0.03, abs=0.02)


def _preset_ledger(delta_phase: float, sigma_train: float, q: float, steps: int) -> PrivacyLedger:
    prof = analytic_gaussian_sigma(2.0, delta_phase)
    vote = analytic_gaussian_sigma(6.0, delta_phase)
    ledger = PrivacyLedger()
    for _ in range(2):  # two FedAvg rounds of local DP-SGD
        ledger.record(
            Release(
                "subsampled_gaussian",
                sigma_train,
                1.0,
                q,
                steps // 2,
                "train",
                sampling="poisson",
                unit="client_sample",
                groups=("strong",),
            )
        )
    ledger.record(
        Release(
            "subsampled_gaussian",
            prof,
            1.0,
            1.0,
            1,
            "profile",
            unit="client_sample",
            groups=("strong", "weak"),
        )
    )
    ledger.record(
        Release(
            "subsampled_gaussian",
            vote,
            math.sqrt(5),
            1.0,
            1,
            "vote",
            unit="client_sample",
            groups=("weak",),
        )
    )
    return ledger


def test_eps8_preset_gives_each_group_six_plus_two():
    """ε = 8 → 6 + 2: strong pays train + profile, weak pays vote + profile, each phase at
    δ/2, and the ledger reports the worst group."""
    delta = 1 / (100 * math.log(100))
    q, steps = 0.05, 20
    sigma = noise_multiplier_for(6.0, delta / 2, q, steps)
    ledger = _preset_ledger(delta / 2, sigma, q, steps)
    by_group = group_epsilons(ledger.releases, delta)
    assert by_group["weak"] == pytest.approx(8.0, abs=1e-6)
    assert 7.9 < by_group["strong"] <= 8.0 + 1e-9
    assert epsilon_from_ledger(ledger.releases, delta) == max(by_group.values())
    again = PrivacyLedger.from_json(ledger.to_json())
    assert group_epsilons(again.releases, delta) == by_group


def test_a_phase_of_gaussians_is_accounted_exactly():
    """Two full-participation releases of σ in one phase are one release of σ/√2."""
    delta = 1e-3
    release = Release("subsampled_gaussian", 2.0, 1.0, 1.0, 2, "profile", groups=("all",))
    single = Release("subsampled_gaussian", 2.0 / math.sqrt(2), 1.0, 1.0, 1, "p", groups=("a",))
    assert group_epsilons([release], delta)["all"] == pytest.approx(
        group_epsilons([single], delta)["a"], rel=1e-9
    )


def _pool(epsilon_inf: bool = False) -> ClientPool:
    clients = {
        f"{c}/{i}": [{"client_id": f"c{c}", "text": f"text {c} {i}", "label": "x"}]
        for c in range(3)
        for i in range(4)
    }
    return ClientPool(
        clients,
        ledger=PrivacyLedger(),
        seed=1,
        unit="client_sample",
        allow_nonprivate=epsilon_inf,
        independence_checks=0,
    )


def _many_votes(batch: ClientBatch, payload: dict) -> np.ndarray:
    """Each sample votes ``payload['votes']`` times for candidate 0 (more than K = 1)."""
    return np.full((len(batch.clients), 1), float(payload["votes"]))


def test_a_vote_vector_with_more_than_k_votes_is_clipped():
    pool = _pool(epsilon_inf=True)
    pool.define_group("weak", [0, 1, 2])
    noiseless = pool.local_gaussian(
        _many_votes,
        {"votes": 5},
        dim=1,
        clip_norm=1.0,
        noise_multiplier=0.0,
        groups=["weak"],
        label="vote",
    )
    assert noiseless.noisy_sum[0] == pytest.approx(12.0)  # 12 samples, each clipped to √K = 1
    assert noiseless.expected_count == 3.0


def test_local_gaussian_noises_each_client_and_records_its_groups():
    pool = _pool()
    pool.define_group("strong", [0])
    pool.define_group("weak", [1, 2])
    out = pool.local_gaussian(
        _many_votes,
        {"votes": 1},
        dim=1,
        clip_norm=1.0,
        noise_multiplier=1.0,
        groups=["strong", "weak"],
        label="profile",
    )
    assert out.noisy_sum[0] != 12.0
    (release,) = pool.ledger.releases
    assert release.groups == ("strong", "weak") and release.unit == "client_sample"
    with pytest.raises(PrivacyError):
        pool.define_group("again", [0])  # a client in two groups
    with pytest.raises(PrivacyError):
        pool.aggregate(
            _many_votes,
            {"votes": 1},
            dim=1,
            clip_norm=1.0,
            noise_multiplier=1.0,
            label="unit-level",
            batched=True,
        )


def test_local_dp_finetune_runs_harness_dp_sgd_and_records_the_strong_group():
    """The harness trains the profile's conditional LM on each strong client's samples (the
    method hands over a state dict only) and returns the mean delta."""
    from benchmark.federation.local_dp_sgd import LocalLMTrainer
    from benchmark.profiles import new_profile

    profile = new_profile("tiny")
    clients = {
        f"{c}/{i}": [{"client_id": f"c{c}", "text": f"in the beginning {c} {i}", "label": "Gen"}]
        for c in range(2)
        for i in range(3)
    }
    pool = ClientPool(
        clients,
        ledger=PrivacyLedger(),
        seed=3,
        unit="client_sample",
        independence_checks=0,
        local_trainer=LocalLMTrainer(profile.conditional_lm),
    )
    pool.define_group("strong", [0, 1])
    weights = profile.conditional_lm().new_model(0).state_dict()
    settings = {"groups": ["strong"], "noise_multiplier": 1.0, "clip_norm": 1.0}
    settings |= {"sample_rate": 1.0, "batch_size": 3, "lr": 0.1, "max_length": 16, "label": "train"}
    delta = pool.local_dp_finetune(
        dict(weights), prompt_template="Book: {label}\n", steps=2, **settings
    )
    assert set(delta) <= set(weights) and any(float(d.abs().sum()) > 0 for d in delta.values())
    (release,) = pool.ledger.releases
    assert (release.groups, release.count, release.label) == (("strong",), 2, "train")
    with pytest.raises(PrivacyError, match="prompt template"):
        pool.local_dp_finetune(dict(weights), prompt_template=["a"], steps=1, **settings)
    with pytest.raises(PrivacyError):  # weights must be plain tensors
        pool.local_dp_finetune({"x": np.zeros(3)}, prompt_template="", steps=1, **settings)


def test_local_dp_sgd_divides_by_the_public_batch_size_not_the_clients_count():
    """θ moves by lr/B · Σ g for the method's public B whatever the client's sample count
    (a divisor q·n would depend on the private n)."""
    import torch

    from benchmark.federation.local_dp_sgd import LocalDPSGD, conditional_example, train_locally
    from benchmark.profiles import new_profile

    lm = new_profile("tiny").conditional_lm()
    model = lm.new_model(0)
    for module in model.modules():  # no dropout: the reference gradient is deterministic
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    example = conditional_example(lm.tokenizer, "Gen\n", "in the beginning", 16)
    ids, labels = example
    model.zero_grad()
    model(input_ids=ids[None], labels=labels[None]).loss.backward()
    expected = {n: -0.1 / 4 * p.grad.clone() for n, p in model.named_parameters()}
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    config = LocalDPSGD(0.0, 1.0, 1.0, batch_size=4, steps=1, lr=0.1, max_length=16)
    train_locally(model, [example], config, np.random.default_rng(0))
    for name, p in model.named_parameters():
        assert torch.allclose(p.detach() - before[name], expected[name], atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_per_sample_scale_clips_to_the_norm_across_tensors(dtype):
    from benchmark.federation.local_dp_sgd import per_sample_scale

    g = torch.Generator().manual_seed(0)
    grads = [torch.randn(300, 70, generator=g, dtype=dtype), torch.randn(5, generator=g)]
    norm = math.sqrt(sum(float(x.double().pow(2).sum()) for x in grads))
    scale = per_sample_scale(grads, 0.5)
    assert scale == pytest.approx(0.5 / norm, rel=1e-6)
    clipped = math.sqrt(sum(float((x.double() * scale).pow(2).sum()) for x in grads))
    assert clipped <= 0.5 * (1 + 1e-6)
    assert per_sample_scale(grads, 2 * norm) == 1.0
    with pytest.raises(PrivacyError):
        per_sample_scale([torch.tensor([float("nan")])], 1.0)
