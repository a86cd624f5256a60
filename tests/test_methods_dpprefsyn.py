"""DPPrefSyn (paper 003): its releases, their accounting, and the synthesis they drive."""

import math
import os

import numpy as np
import pytest
from model_methods_support import finish, make_context, make_preference_split, run_rounds

from benchmark.federation.clients import ClientData, client_scope
from benchmark.privacy.accountants import epsilon, epsilon_from_ledger, noise_multiplier_for
from benchmark.privacy.errors import PrivacyError
from benchmark.privacy.ledger import (
    EXPONENTIAL,
    LAPLACE,
    NONPRIVATE,
    SUBSAMPLED_GAUSSIAN,
    UNCHARGED,
)
from benchmark.spec import SpecError
from methods.dpprefsyn import DPPrefSyn
from methods.preference_features import Differences, project


def run(tmp_path, epsilon=4.0, params=None, **context):
    split = make_preference_split()
    ctx = make_context(
        tmp_path,
        epsilon=epsilon,
        split=split,
        unit="sample",
        delta=1e-4,
        accountant="prv",
        **context,
    )
    method = DPPrefSyn(DPPrefSyn.resolve_config("tiny", {"gap": 0.0, **(params or {})}))
    state = run_rounds(method, ctx)
    return ctx, state, finish(method, ctx, state)


@pytest.fixture(scope="module")
def private_run(tmp_path_factory):
    return run(tmp_path_factory.mktemp("dpprefsyn"))


def test_every_private_step_is_a_recorded_harness_release(private_run):
    ctx, state, _ = private_run
    releases = ctx.pool.ledger.releases
    kmeans = 2 * DPPrefSyn.configs["tiny"]["kmeans_iterations"]
    expected = [LAPLACE, EXPONENTIAL] + [LAPLACE] * kmeans + [LAPLACE]  # mean, PCA, k-means, sizes
    assert [r.mechanism for r in releases[: len(expected)]] == expected
    rewards = releases[len(expected) :]
    assert [r.part for r in rewards] == state["kept"] and state["kept"]
    assert all(r.mechanism == SUBSAMPLED_GAUSSIAN and r.partition == "clusters" for r in rewards)
    # ε0 = ε1 = ε/8, the histogram ε/16, the rest to DP-SGD: the total stays within ε = 4
    pure = sum(r.epsilon for r in releases if r.epsilon)
    assert pure == pytest.approx(4 * (1 / 8 + 1 / 8 + 1 / 16))
    assert epsilon_from_ledger(releases, 1e-4, "prv") <= 4.0
    # one σ for every cluster, solved for the smallest allowed one (q = 4/n_min, 4 epochs)
    # or raised for a kept cluster that costs more: the worst of them spends the budget
    n_min, sigma = state["smallest"], rewards[0].noise_multiplier
    assert {r.noise_multiplier for r in rewards} == {sigma}
    schedules = [(4 / n_min, n_min)] + [(r.sample_rate, r.count) for r in rewards]
    worst = max(epsilon(sigma, q, steps, 1e-4, "prv") for q, steps in schedules)
    assert pure + worst == pytest.approx(4.0, abs=0.01)


def test_a_kept_cluster_whose_steps_round_up_gets_more_noise_not_more_epsilon(tmp_path):
    """The paper solves σ2 for the smallest allowed cluster, n_min. A kept cluster of
    released size n_min + 0.3 runs ⌈4·(n_min + 0.3)/4⌉ = n_min + 1 steps at rate
    4/(n_min + 0.3): q·T > 4 epochs, more than n_min's run costs under that σ2. σ2 is
    raised for it, so the run stays within ε instead of being stopped by the budget."""
    ctx = make_context(
        tmp_path, epsilon=4.0, split=make_preference_split(), unit="sample", delta=1e-4,
        accountant="prv",
    )  # fmt: skip
    method = DPPrefSyn(DPPrefSyn.resolve_config("tiny", {"gap": 0.0}))
    state = run_rounds(method, ctx, rounds=[0, 1])
    n_min = state["smallest"]
    state = {**state, "sizes": np.full(2, n_min + 0.3), "kept": [0, 1]}
    pure = sum(r.epsilon for r in ctx.pool.ledger.releases)
    paper_sigma = noise_multiplier_for(4.0 - pure, 1e-4, 4 / n_min, n_min, "prv")
    assert pure + epsilon(paper_sigma, 4 / (n_min + 0.3), n_min + 1, 1e-4, "prv") > 4.01
    state = run_rounds(method, ctx, state, rounds=[2])
    rewards = [r for r in ctx.pool.ledger.releases if r.partition]
    assert [(r.sample_rate, r.count) for r in rewards] == [(4 / (n_min + 0.3), n_min + 1)] * 2
    assert rewards[0].noise_multiplier > paper_sigma
    assert epsilon_from_ledger(ctx.pool.ledger.releases, 1e-4, "prv") <= 4.0


def test_the_cluster_histogram_is_noisy_and_charged(private_run):
    ctx, state, _ = private_run
    (sizes,) = [r for r in ctx.pool.ledger.releases if r.label == "cluster_sizes"]
    assert (sizes.mechanism, sizes.epsilon) == (LAPLACE, 4 / 16)
    assert not np.allclose(state["sizes"], np.round(state["sizes"]))  # Laplace noise added


def test_small_clusters_are_discarded_at_n_over_k_plus_4(private_run):
    _, state, _ = private_run
    smallest = 120 // (2 + 4)
    assert state["smallest"] == smallest
    assert state["kept"] == [k for k, s in enumerate(state["sizes"]) if s >= smallest]


def test_the_release_ranks_public_candidates(private_run):
    ctx, _, artifact = private_run
    prompts = {r["prompt"] for r in ctx.public}
    assert artifact.kind == "preferences" and artifact.pairs
    for pair in artifact.pairs:
        assert pair["prompt"] in prompts and pair["chosen"] != pair["rejected"]


def test_the_paper_accounting_needs_a_simulated_guarantee(tmp_path):
    with pytest.raises(PrivacyError, match="non-private run"):
        run(tmp_path / "formal", params={"histogram": "exact"})
    ctx, _, _ = run(tmp_path / "simulated", params={"histogram": "exact"}, guarantee="simulated")
    labels = {r.label: r.mechanism for r in ctx.pool.ledger.releases}
    assert labels["cluster_sizes"] == UNCHARGED


def test_the_nonprivate_variant_learns_the_majority_preference(tmp_path):
    ctx, state, artifact = run(tmp_path, epsilon=math.inf)
    assert {r.mechanism for r in ctx.pool.ledger.releases} == {NONPRIVATE}
    split = make_preference_split()
    with client_scope():  # the differences as the units compute them, client side
        units = [ClientData([r], {}) for r in split.records("train")]
        diffs = Differences(ctx.profile.embedder())._compute(units)
    z = project(diffs, state["mean"], state["basis"], True)
    majority = [i for i in range(len(z)) if i % 3]  # the warm-answer annotators: 2 in 3
    accuracy = max(np.mean(z[majority] @ theta > 0) for theta in state["rewards"].values())
    assert accuracy > 0.9


def test_without_pca_the_rewards_live_in_the_embedding_space(tmp_path):
    ctx, state, artifact = run(tmp_path, params={"pca": False})
    assert "exponential" not in {r.mechanism for r in ctx.pool.ledger.releases}
    dim = ctx.profile.embedder().dim
    assert state["basis"].shape == (dim, dim)
    assert all(theta.shape == (dim,) for theta in state["rewards"].values())
    assert artifact.pairs


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"candidates": 1}, "candidates"),
        ({"pca_share": 0.5, "kmeans_share": 0.5}, "no DP-SGD budget"),
        ({"histogram": "none"}, "histogram"),
        ({"histogram_share": 0.0}, "histogram_share"),
        ({"clusters": 0}, "clusters"),
        ({"epochs": True}, "epochs"),
        ({"lr": -1}, "lr"),
        ({"clip": float("nan")}, "clip"),
        ({"temperature": "hot"}, "temperature"),
        ({"pca": "no"}, "pca"),
    ],
)
def test_bad_params_are_refused_before_any_release(tmp_path, params, message):
    with pytest.raises(SpecError, match=message):
        run(tmp_path, params=params)


class CountingGenerator:
    name = "counting"

    def __init__(self):
        self.calls = 0

    def generate(self, prompts, params, chat=True):
        self.calls += 1
        return [f"reply {i} Human: more" for i in range(len(prompts))]


def test_candidates_are_cut_at_the_stop_string_and_cached_by_their_inputs(tmp_path, monkeypatch):
    from benchmark.profiles.base import SamplingParams
    from benchmark.profiles.candidate_corpus import candidates

    monkeypatch.setenv("FEDSYNTH_CACHE", str(tmp_path))
    generator, params = CountingGenerator(), SamplingParams(max_new_tokens=4)
    first = candidates(generator, ["a", "b"], 3, params, ["Human:"])
    assert first == [["reply 0", "reply 1", "reply 2"], ["reply 3", "reply 4", "reply 5"]]
    assert candidates(generator, ["a", "b"], 3, params, ["Human:"]) == first
    assert generator.calls == 1
    (cached,) = (tmp_path / "candidates").iterdir()
    cached.write_text(cached.read_text().replace("reply 4", 'planted"]]]'))  # corrupt JSON
    assert candidates(generator, ["a", "b"], 3, params, ["Human:"]) == first
    assert generator.calls == 2
    candidates(generator, ["a", "b"], 3, SamplingParams(max_new_tokens=4, seed=1), ["Human:"])
    assert generator.calls == 3  # another seed is another key


class RefusingGenerator(CountingGenerator):
    def generate(self, prompts, params, chat=True):
        raise AssertionError("finish must read the candidates the harness built")


def test_the_harness_builds_the_candidates_that_finish_reads(tmp_path, monkeypatch):
    """A sandboxed method process may not write the candidate cache, so the harness builds
    the candidates dpprefsyn asks for (as data) before setup, and finish only reads them."""
    from benchmark.profiles.candidate_corpus import build_requested

    monkeypatch.setenv("FEDSYNTH_CACHE", str(tmp_path / "cache"))
    ctx = make_context(
        tmp_path, epsilon=4.0, split=make_preference_split(), unit="sample", delta=1e-4,
        accountant="prv",
    )  # fmt: skip
    method = DPPrefSyn(DPPrefSyn.resolve_config("tiny", {"gap": 0.0}))
    generator = CountingGenerator()
    build_requested(method.cache_requests(ctx), lambda: generator)
    assert generator.calls == 1
    monkeypatch.setattr(ctx.profile, "generator", RefusingGenerator)
    artifact = finish(method, ctx, run_rounds(method, ctx))
    assert artifact.pairs and all(p["chosen"].startswith("reply ") for p in artifact.pairs)


def test_a_method_process_may_read_the_candidates_the_harness_builds_after_its_launch(
    tmp_path, monkeypatch
):
    """The cache holds a denied directory (the builders' sources), so a sandbox grants its
    entries as they are at launch: on a fresh cache the candidate sets, built after the
    launch, were out of the method process's reach and it generated them all again."""
    from benchmark.isolation.coordinator import policy_for
    from benchmark.isolation.sandbox import beneath
    from benchmark.profiles.candidate_corpus import candidates_dir

    monkeypatch.setenv("FEDSYNTH_CACHE", str(tmp_path / "cache"))
    (tmp_path / "cache" / "sources").mkdir(parents=True)
    policy = policy_for([tmp_path / "code"], [tmp_path / "scratch"])
    readable = [os.path.realpath(p) for p in policy.read_only]
    assert any(beneath(os.path.realpath(candidates_dir()), r) for r in readable)
    assert not any(beneath(os.path.realpath(tmp_path / "cache" / "sources"), r) for r in readable)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"kind": "texts"}, "unknown kind"),
        ({"prompts": ["a", 3]}, "lists of strings"),
        ({"prompts": "abc"}, "lists of strings"),
        ({"count": 0}, "count"),
        ({"count": True}, "count"),
        ({"params": [10**6, 0.9, 1.0, 0]}, "max_new_tokens"),
        ({"params": [8, float("nan"), 1.0, 0]}, "temperature"),
        ({"extra": 1}, "fields"),
    ],
)
def test_a_malformed_cache_request_is_refused_before_any_generation(change, message):
    from benchmark.profiles.base import SamplingParams
    from benchmark.profiles.candidate_corpus import build_requested, candidate_request

    request = candidate_request(["a"], 2, SamplingParams(max_new_tokens=4), ["Human:"])
    generator = CountingGenerator()
    with pytest.raises(ValueError, match=message):
        build_requested([candidate_request(["b"], 2, SamplingParams(), []), request | change],
                        lambda: generator)  # fmt: skip
    assert generator.calls == 0
