"""fed_ctg (paper 001): the refinement's pieces, the votes through the pool, and the adapter's
phases, groups and variants on a small labelled split (tiny profile)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from benchmark.control_codes import code_field, code_slots
from benchmark.data import FederatedSplit
from benchmark.federation.local_dp_sgd import control_prompt
from benchmark.federation.pool import ClientPool
from benchmark.privacy.ledger import PrivacyLedger
from benchmark.profiles import new_profile
from benchmark.profiles.base import Embedder
from benchmark.runner import run
from benchmark.spec import SpecError, spec_from_dict
from methods.ctg_refinement import (
    CodeCounts,
    KNNVotes,
    sample_without_replacement,
    samples_per_code,
)
from methods.fed_ctg import PUBMED_ZERO_SHOT, YELP_ZERO_SHOT, server_step


def test_samples_per_code_clips_negative_noisy_counts_and_normalises():
    assert samples_per_code(np.array([30.0, -5.0, 10.0]), 100).tolist() == [75, 0, 25]
    assert samples_per_code(np.array([-1.0, -2.0]), 10).tolist() == [5, 5]  # all noise


def test_sampling_without_replacement_follows_algorithm_a4():
    rng = np.random.default_rng(0)
    weights = np.array([5.0, -3.0, 0.0, 2.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    for _ in range(20):
        chosen = sample_without_replacement(weights, 0.3, rng)
        assert len(chosen) == 3 == len(set(chosen.tolist()))  # ⌊0.3 · 10⌋, distinct
        assert set(chosen.tolist()) == {0, 3, 4}  # only positive votes while any remain
    assert len(sample_without_replacement(np.zeros(3), 0.2, rng)) == 1  # max(1, ⌊0.6⌋)
    assert len(sample_without_replacement(np.full(4, -1.0), 1.0, rng)) == 4  # uniform rest


def test_zero_shot_prompts_fill_the_paper_code_strings():
    """Paper 001 §1.2's verbatim prompts from the builders' code strings (yelp
    ``label=paper001``, pubmed ``label=mesh_indicators``) and from ``a|b`` codes."""
    yelp = "Please generate a review about business category Bars with rating star 4.0:\n\n"
    assert control_prompt(YELP_ZERO_SHOT, "Business Category: Bars, Review Stars: 4.0") == yelp
    assert control_prompt(YELP_ZERO_SHOT, "Bars|4.0") == yelp
    code = "Anatomy: 1, Diseases: 0, Chemicals and Drugs: 1, Named Groups: 0, Health Care: 0"
    assert control_prompt(PUBMED_ZERO_SHOT, code) == (
        "Please generate a scientific abstract on a biomedical study that covers topics "
        "Anatomy, Chemicals and Drugs but does not cover topics Diseases, Named Groups, "
        "Health Care:\n\n"
    )
    assert control_prompt("{label}\n", "sports") == "sports\n"


def test_server_step_sgd_is_fedavg_and_adam_is_fedadam():
    params, delta = torch.zeros(3), torch.tensor([1.0, -2.0, 0.5])
    assert torch.equal(server_step(params, delta, {}, "sgd", 1.0), delta)
    moments: dict = {}
    stepped = server_step(params, delta, moments, "adam", 1e-3)
    # first step: m̂ = −Δ, √v̂ = |Δ|, so θ moves by η·Δ/(|Δ| + τ), τ = 1e-3
    assert torch.allclose(stepped, 1e-3 * delta / (delta.abs() + 1e-3), atol=1e-7)
    assert moments["step"] == 1


class PositionEmbedder(Embedder):
    """Embeds ``"<x>"`` as the point (x, 0): nearest neighbours are easy to predict."""

    name, dim = "position", 2

    def embed(self, texts: list[str]) -> np.ndarray:
        return np.array([[float(t), 0.0] for t in texts], dtype=np.float32)


def _sample_pool() -> ClientPool:
    """Two clients with samples at 0.0 and 10.0 (code a) and 5.0 (code b)."""
    samples = [("c0", "0.0", "a"), ("c0", "5.0", "b"), ("c1", "10.0", "a"), ("c1", "0.1", "z")]
    units = {
        f"{c}/{i}": [{"client_id": c, "text": t, "label": lab}]
        for i, (c, t, lab) in enumerate(samples)
    }
    return ClientPool(
        units,
        ledger=PrivacyLedger(),
        seed=2,
        unit="client_sample",
        allow_nonprivate=True,
        independence_checks=0,
    )


def test_knn_votes_go_to_the_k_nearest_candidates_of_the_samples_own_code():
    pool = _sample_pool()
    pool.define_group("weak", [0, 1])
    candidates = ["1.0", "2.0", "9.0", "4.0", "6.0"]
    codes = ["a", "b"]
    votes = pool.local_gaussian(
        KNNVotes(PositionEmbedder()),
        {
            "embeddings": PositionEmbedder().embed(candidates),
            "candidate_codes": np.array([0, 0, 0, 1, 1]),
            "codes": codes,
            "k": 2,
        },
        dim=5,
        clip_norm=math.sqrt(2),
        noise_multiplier=0.0,
        groups=["weak"],
        label="vote",
    ).noisy_sum
    # 0.0 (a) → 1.0, 2.0; 10.0 (a) → 9.0, 2.0; 5.0 (b) → 4.0, 6.0; 0.1 (z: no code) → none
    assert votes.tolist() == [1.0, 2.0, 1.0, 1.0, 1.0]
    counts = pool.local_gaussian(
        CodeCounts(),
        {"codes": codes},
        dim=2,
        clip_norm=1.0,
        noise_multiplier=0.0,
        groups=["weak"],
        label="profile",
    ).noisy_sum
    assert counts.tolist() == [2.0, 1.0]


class AllVotes(KNNVotes):
    """A vote function that ignores K and votes for every candidate of the code."""

    def __call__(self, batch, payload):
        return np.ones((len(batch), len(payload["embeddings"])))


def test_a_sample_voting_for_more_than_k_candidates_is_clipped_to_sqrt_k():
    pool = _sample_pool()
    pool.define_group("weak", [0, 1])
    votes = pool.local_gaussian(
        AllVotes(PositionEmbedder()),
        {"embeddings": np.zeros((8, 2)), "candidate_codes": np.zeros(8), "codes": ["a"], "k": 2},
        dim=8,
        clip_norm=math.sqrt(2),
        noise_multiplier=0.0,
        groups=["weak"],
        label="vote",
    ).noisy_sum
    # 4 samples × a row of eight 1s clipped to norm √2: each entry 4 · √2/√8 = 2, not 4
    assert votes.tolist() == pytest.approx([2.0] * 8)


def _labelled_split(strong: tuple[str, ...] = ()) -> FederatedSplit:
    codes = ["psalm", "law"]
    train = [
        {
            "text": f"{codes[i % 2]} verse {i} of the lord",
            "client_id": f"c{i % 10}",
            "label": codes[i % 2],
            "strong": f"c{i % 10}" in strong,
        }
        for i in range(60)
    ]
    held = [
        {"text": f"{codes[i % 2]} held {i}", "client_id": f"h{i % 2}", "label": codes[i % 2]}
        for i in range(8)
    ]
    return FederatedSplit(
        "labelled",
        {"version": "v-test", "content_hash": "abc"},
        {"train": train, "validation": held, "test": held, "public": []},
    )


def _run(
    tmp_path,
    epsilon: float,
    delta: float = 1e-3,
    large_delta: bool = False,
    split: FederatedSplit | None = None,
    **params,
):
    spec = spec_from_dict(
        {
            "split": {"path": "unused"},
            "method": {"name": "fed_ctg", "params": {"num_synthetic": 4, **params}},
            "privacy": {
                "epsilon": epsilon,
                "delta": delta,
                "unit": "client_sample",
                "allow_large_delta": large_delta,
            },
            "seed": 1,
            "profile": "tiny",
        }
    )
    split = split or _labelled_split()
    return run(spec, runs_root=tmp_path, profile=new_profile("tiny"), split=split)


def _phases(record) -> dict[str, list[str]]:
    return {r["label"]: r["groups"] for r in record["privacy"]["ledger"]}


def test_fed_ctg_spends_each_groups_budget_and_reports_the_worst(tmp_path):
    record = _run(tmp_path, 8.0).record
    privacy = record["privacy"]
    assert _phases(record) == {"train": ["strong"], "profile": ["strong", "weak"], "vote": ["weak"]}
    groups = privacy["group_epsilons"]
    assert set(groups) == {"strong", "weak"}
    assert privacy["epsilon"] == pytest.approx(max(groups.values()))
    assert all(7.9 <= e <= 8.0 + 1e-9 for e in groups.values())  # 6 + 2 each, basic composition
    profile = next(r for r in privacy["ledger"] if r["label"] == "profile")
    vote = next(r for r in privacy["ledger"] if r["label"] == "vote")
    assert vote["sensitivity"] == pytest.approx(math.sqrt(5))  # K = 5
    assert profile["noise_multiplier"] > vote["noise_multiplier"]  # ε_prof = 2 < ε_vote = 6


@pytest.mark.parametrize(
    ("params", "phases"),
    [
        ({"finetune": False, "refinement": "votes"}, {"profile": ["weak"], "vote": ["weak"]}),
        ({"refinement": "none"}, {"train": ["strong"], "profile": ["strong", "weak"]}),
        ({"refinement": "uniform"}, {"train": ["strong"], "profile": ["strong", "weak"]}),
    ],
)
def test_variants_release_only_their_phases(tmp_path, params, phases):
    result = _run(tmp_path, 4.0, **params)
    assert _phases(result.record) == phases
    assert result.artifact.kind == "labelled_texts"
    assert set(result.artifact.labels) <= {"law", "psalm"}


def test_delta_rule_refuses_a_delta_that_is_not_one_over_n_log_n(tmp_path):
    with pytest.raises(SpecError, match="1/\\(N log N\\)"):
        _run(tmp_path, 8.0, delta=1e-3, delta_rule="ln")
    n = 10  # clients of the split
    paper_delta = 1 / (n * math.log(n))  # > 1 / (60 samples): the paper's δ is that large
    record = _run(tmp_path, 8.0, delta=paper_delta, large_delta=True, delta_rule="ln").record
    assert record["privacy"]["epsilon"] <= 8.0 + 1e-9


def test_strong_clients_can_come_from_the_splits_flags(tmp_path):
    flagged = _labelled_split(strong=("c3", "c7"))
    units = {f"{r['client_id']}/{i}": [r] for i, r in enumerate(flagged.records("train"))}
    pool = ClientPool(units, ledger=PrivacyLedger(), seed=0, unit="client_sample")
    assert pool.strong_clients() == [3, 7]  # positions in client-id order
    with pytest.raises(SpecError, match="flags no strong client"):
        _run(tmp_path, 8.0, strong_clients="split")
    record = _run(tmp_path, 8.0, split=flagged, strong_clients="split").record
    assert "train" in _phases(record)


def test_composite_codes_parse_into_fields_and_slots():
    yelp = "Business Category: Bars, Review Stars: 4.0"
    assert code_field(yelp, "Review Stars") == "4.0" and code_field(yelp, "Anatomy") is None
    assert code_field("sports", "Review Stars") is None
    assert code_slots("Bars|4.0")["label_2"] == "4.0"
