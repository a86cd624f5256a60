"""Paper 002's dp_ftrl_dm: the mid-training pause is post-processing (no ledger entry), the
FTRL anchor follows the public delta, distribution matching ranks by log p_priv + log p_pub,
distillation's loss, the teacher cache, and a released model scored in its own vocabulary."""

import math

import numpy as np
import pytest
import torch
from model_methods_support import finish, make_context, make_split, run_rounds

from benchmark.artifact import Artifact, ArtifactError
from benchmark.data import FederatedSplit
from benchmark.evaluation.downstream import DownstreamConfig, run_downstream
from benchmark.privacy.accountants import epsilon_from_ledger
from benchmark.privacy.ledger import TREE_AGGREGATION
from benchmark.profiles import get_profile
from benchmark.profiles.ondevice_kinds import ondevice_tokenizer
from benchmark.profiles.teacher_corpus import teacher_corpus
from benchmark.profiles.word_tokenizer import word_pre_tokenize
from benchmark.spec import SpecError
from methods.dp_ftrl import tree_schedule
from methods.dp_ftrl_dm import DPFTRLDM
from methods.public_training import kd_loss, random_fraction, top_fraction

DELTA = 1e-5
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def dm(**params):
    return DPFTRLDM(DPFTRLDM.resolve_config("tiny", params))


def test_the_mid_training_pause_adds_no_ledger_entry_and_moves_the_anchor(tmp_path):
    ctx = make_context(tmp_path, epsilon=2.0, delta=DELTA)
    method = dm(rounds=4, midtrain_round=2)
    state = run_rounds(method, ctx, rounds=range(2))
    releases_before = list(ctx.pool.ledger.releases)
    costs_before = ctx.pool.costs.summary()
    offset = state["params"] - state["start"]  # η·m, what the DP rounds contributed
    params_before = state["params"].clone()

    method.midtrain(ctx, state, 2)

    assert ctx.pool.ledger.releases == releases_before  # scoring + training: public only
    assert ctx.pool.costs.summary() == costs_before
    assert not torch.equal(state["params"], params_before)  # mid-training did train
    torch.testing.assert_close(state["params"] - state["start"], offset, rtol=0, atol=1e-6)

    state = run_rounds(method, ctx, state, rounds=range(2, 4))
    releases = ctx.pool.ledger.releases
    # one tree across the pause (the conservative accounting of paper 002 §5)
    assert [(r.mechanism, r.label, r.count) for r in releases] == [
        (TREE_AGGREGATION, "dp_ftrl_dm/tree0", 4)
    ]
    assert epsilon_from_ledger(releases, DELTA) <= 2.0 + 1e-9
    artifact = finish(method, ctx, state)
    assert artifact.kind == "model" and artifact.tokenizer == "public_llm"


def test_the_paper_schedule_is_one_1600_leaf_tree():
    assert tree_schedule(342_477, 100, 1600) == (100, [1600])
    config = DPFTRLDM.resolve_config("paper", {})
    assert (config["rounds"], config["midtrain_round"], config["midtrain_fraction"]) == (
        1600, 800, 0.0008
    )  # fmt: skip


def test_a_schedule_that_needs_a_second_tree_is_refused_with_mid_training(tmp_path):
    ctx = make_context(tmp_path, epsilon=2.0, delta=DELTA)  # 8 clients: 4 leaves per tree
    with pytest.raises(SpecError, match="one DP-FTRL tree"):
        run_rounds(dm(rounds=6, cohort_size=2, midtrain_round=3, pretrain="all"), ctx)
    assert ctx.pool.ledger.releases == []
    run_rounds(dm(rounds=6, cohort_size=2, midtrain_round=None), ctx)  # TreeRestart is fine
    # at ε = ∞ no tree is opened (the non-private bound samples cohorts), so no refusal
    unbounded = make_context(tmp_path, epsilon=math.inf)
    run_rounds(dm(rounds=6, cohort_size=2, midtrain_round=3), unbounded)


@pytest.mark.parametrize(
    "params, match",
    [
        ({"tokenizer": "word_unigram:100"}, "distillation needs tokenizer 'public_llm'"),
        ({"midtrain_round": 4}, r"in \[0, rounds=4\)"),
        ({"midtrain_data": "best"}, "midtrain_data"),
        ({"midtrain_round": "2"}, "an integer"),
        ({"midtrain_fraction": 0.0}, "midtrain_fraction"),
        ({"distill_top_k": 0}, "distill_top_k"),
        ({"tokenizer": "my_own.json", "distill_beta": 0.0}, "word_unigram:K"),
    ],
)
def test_bad_params_fail_before_training(tmp_path, params, match):
    ctx = make_context(tmp_path, epsilon=2.0, delta=DELTA)
    with pytest.raises(SpecError, match=match):
        run_rounds(dm(**params), ctx)


def test_distribution_matching_ranks_by_private_plus_public_log_probability(tmp_path):
    ctx = make_context(tmp_path, epsilon=2.0, delta=DELTA)
    method = dm(midtrain_fraction=0.1)
    state = run_rounds(method, ctx, rounds=range(1))
    model = method.model(ctx)
    texts = [r["text"] for r in ctx.public]
    teacher = method.teacher(ctx)
    priv_only = dm(midtrain_fraction=0.1, midtrain_data="dm_private_only")
    priv_only._lm, priv_only._teacher = method._lm, teacher
    from benchmark.training import load_flat

    load_flat(model, state["params"])
    by_priv = priv_only.midtrain_rows(ctx, model, 1)
    # make one record the public LLM's clear favourite: dm picks it, p_priv alone does not
    favourite = next(i for i in range(len(texts)) if i not in by_priv)
    teacher.mean_logprob = np.full(len(texts), -50.0)
    teacher.mean_logprob[favourite] = 0.0
    by_both = method.midtrain_rows(ctx, model, 1)
    assert favourite in by_both and len(by_both) == len(by_priv) == math.ceil(0.1 * len(texts))


def test_top_and_random_fractions():
    scores = np.array([0.5, np.nan, 2.0, 2.0, -1.0])
    assert top_fraction(scores, 0.4) == [2, 3]
    assert top_fraction(scores, 0.6) == [0, 2, 3]
    assert top_fraction(scores, 1.0) == [0, 2, 3, 4]  # NaN (too short to score) never chosen
    drawn = random_fraction([0, 2, 3, 4], 5, 0.4, seed=3)
    assert len(drawn) == 2 and set(drawn) <= {0, 2, 3, 4}
    assert drawn == random_fraction([0, 2, 3, 4], 5, 0.4, seed=3)
    with pytest.raises(ValueError):
        top_fraction(scores, 0.0)


def test_kd_loss_is_cross_entropy_to_the_renormalised_top_k():
    gen = torch.Generator().manual_seed(0)
    student = torch.randn(2, 3, 7, generator=gen)
    teacher = torch.randn(2, 3, 7, generator=gen)
    values, ids = teacher.topk(3, dim=-1)
    valid = torch.tensor([[True, True, False], [True, False, False]])
    got = kd_loss(student, ids, values, valid, temperature=2.0)
    expected = []
    for b, t in zip(*torch.nonzero(valid, as_tuple=True), strict=True):
        p = torch.zeros(7)
        p[ids[b, t]] = (values[b, t] / 2.0).softmax(-1)
        expected.append(-(p * (student[b, t] / 2.0).log_softmax(-1)).sum())
    torch.testing.assert_close(got, torch.stack(expected).mean())


def test_the_teacher_pass_is_cached_and_a_tampered_shard_is_recomputed(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDSYNTH_CACHE", str(tmp_path))
    llm = get_profile("tiny").public_llm()
    texts = [r["text"] for r in make_split().records("public")]
    first = teacher_corpus(llm, texts, 16, 4)
    shard = next((tmp_path / "teacher").glob("*/shard-00000.pt"))
    again = teacher_corpus(llm, texts, 16, 4)
    assert again.ids == first.ids
    np.testing.assert_allclose(again.mean_logprob, first.mean_logprob)
    assert all(torch.equal(a, b) for a, b in zip(again.topk_ids, first.topk_ids, strict=True))
    assert first.topk_ids[0].shape == (len(first.ids[0]) - 1, 4)
    stored = torch.load(shard, weights_only=True)
    stored["topk_logits"] = torch.zeros_like(stored["topk_logits"])
    stored["key"] = "planted"
    torch.save(stored, shard)
    rebuilt = teacher_corpus(llm, texts, 16, 4)
    assert torch.equal(rebuilt.topk_logits[0], first.topk_logits[0])


def test_a_released_model_is_scored_in_the_vocabulary_it_names(tmp_path):
    toy = make_split()
    parts = {p: toy.records(p) for p in ("train", "validation", "public")}
    split = FederatedSplit("toy", toy.manifest, {**parts, "test": parts["validation"]})
    ctx = make_context(tmp_path, epsilon=2.0, delta=DELTA, split=split)
    method = dm(tokenizer="word_unigram:100", distill_beta=0.0, midtrain_data="random")
    artifact = finish(method, ctx, run_rounds(method, ctx))
    assert artifact.tokenizer == "word_unigram:100"
    profile = get_profile("tiny")
    config = DownstreamConfig(max_length=32)
    word = ondevice_tokenizer(profile, "word_unigram:100", split.texts("public"))
    result = run_downstream(artifact, split, profile.ondevice_lm(), config, 0, model_tokenizer=word)
    words = sum(len(word_pre_tokenize(t)[:32]) - 1 for t in split.texts("test"))
    assert result.test["tokens"] == words  # word units, not the BPE's


def test_an_artifact_names_a_harness_tokenizer_and_only_for_a_model():
    with pytest.raises(ArtifactError, match="artifact.tokenizer"):
        Artifact("model", model_dir="m", tokenizer="/tmp/evil.json")
    with pytest.raises(ArtifactError, match="only a model artifact"):
        Artifact("texts", texts=["a"], tokenizer="public_llm")
    with pytest.raises(ArtifactError, match="K >= 100"):  # a vocabulary too small to be one
        Artifact("model", model_dir="m", tokenizer="word_unigram:8")
    assert Artifact("model", model_dir="m", tokenizer="word_unigram:10000").tokenizer
