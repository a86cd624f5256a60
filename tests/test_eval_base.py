"""evaluate(): registry lookup, recorded settings, skipped metrics, shared work and caches."""

import numpy as np
import pytest
from test_eval_support import HashEmbedder, TinyProfile, make_split, template_texts

import benchmark.evaluation.base as base
from benchmark.artifact import Artifact
from benchmark.evaluation.base import EvalContext, evaluate
from benchmark.evaluation.cost import Cost
from benchmark.evaluation.downstream import DownstreamConfig
from benchmark.evaluation.embedding_cache import EmbeddingCache
from benchmark.registry import METRICS

BUILTINS = {
    "next_token": "NextTokenAccuracy",
    "fid": "FID",
    "mauve": "MAUVE",
    "classification": "Classification",
    "mia": "MembershipInference",
    "dcr": "DistanceToClosestRecord",
    "win_rate": "WinRate",
}


@pytest.fixture(scope="module")
def ctx(tmp_path_factory):
    train, val, test = template_texts(64, 1), template_texts(16, 2), template_texts(16, 3)
    profile = TinyProfile(train + val + test)
    return EvalContext(
        split=make_split(train, val, test),
        profile=profile,
        seed=3,
        work_dir=tmp_path_factory.mktemp("base"),
        downstream=DownstreamConfig(epochs=2, lr=3e-3, batch_size=16),
    )


def test_every_builtin_metric_resolves_to_its_class():
    for name, cls in BUILTINS.items():
        metric = METRICS.get(name)
        assert metric.__name__ == cls and metric.name == name


def test_next_token_and_mia_share_one_downstream_training(ctx, monkeypatch):
    calls = []
    real = base.run_downstream
    monkeypatch.setattr(base, "run_downstream", lambda *a: calls.append(a) or real(*a))
    artifact = Artifact("texts", texts=template_texts(48, 9))
    out = evaluate(artifact, ctx, [{"name": "next_token"}, {"name": "mia", "n_samples": 16}])
    assert len(calls) == 1
    nt = out["metrics"]["next_token"]
    assert 0 < nt["top1"] <= nt["top3"] <= 1 and nt["ce"] > 0
    assert nt["selected_epoch"] in (1.0, 2.0)
    assert out["downstream"]["config"]["epochs"] == 2
    assert len(out["downstream"]["validation_history"]) == 2
    assert out["settings"]["mia"] == {
        "name": "mia", "n_samples": 16, "reference": "start",
        "nonmember_parts": ["validation", "test"],
    }  # fmt: skip


def test_empty_text_release_scores_the_public_start(ctx):
    out = evaluate(Artifact("texts"), ctx, [{"name": "next_token"}, {"name": "fid"}])
    start = ctx.profile.ondevice_lm().new_model(ctx.seed)
    from benchmark.evaluation.downstream import evaluate_lm

    assert (
        out["metrics"]["next_token"]["top1"]
        == evaluate_lm(start, ctx.profile.ondevice_lm().tokenizer, ctx.split.texts("test"))["top1"]
    )
    assert out["metrics"]["next_token"]["selected_epoch"] == 0
    assert "fid" in out["skipped"]
    test = out["metrics"]["next_token"]["per_client"]["test"]
    assert sum(test["top1_hits"]) / sum(test["tokens"]) == out["metrics"]["next_token"]["top1"]
    assert set(out["metrics"]["next_token"]["per_client"]) == {"test", "validation"}


def test_labels_allow_two_configurations_and_duplicates_are_refused(ctx):
    texts = Artifact("texts", texts=ctx.split.texts("test"))
    out = evaluate(texts, ctx, [{"name": "fid"}, {"name": "fid", "label": "fid_val",
                                                   "reference_part": "validation"}])  # fmt: skip
    assert out["metrics"]["fid"]["fid"] == pytest.approx(0.0, abs=1e-8)
    assert out["metrics"]["fid_val"]["fid"] > 0
    with pytest.raises(ValueError, match="requested twice"):
        evaluate(texts, ctx, [{"name": "fid"}, {"name": "fid"}])
    with pytest.raises(TypeError):
        evaluate(texts, ctx, [{"name": "fid", "no_such_setting": 1}])


def test_embedding_cache_embeds_each_set_once_and_persists(tmp_path):
    embedder = HashEmbedder()
    cache = EmbeddingCache(embedder, tmp_path)
    a, b = ["the cat", "the dog"], ["the dog", "the cat"]
    first = cache.embed(a)
    assert cache.embed(list(a)) is first and embedder.calls == 1
    cache.embed(b)  # same texts in another order are another set
    assert embedder.calls == 2 and len(list(tmp_path.glob("*.npy"))) == 2
    reloaded = EmbeddingCache(embedder, tmp_path).embed(a)
    assert embedder.calls == 2 and np.array_equal(reloaded, first)
    assert cache.embed([]).shape == (0, embedder.dim)


def test_cost_passes_numeric_pool_counters_through(ctx):
    ctx_costs = EvalContext(split=ctx.split, profile=ctx.profile, costs={
        "floats_down_per_client_round": 82_000_000, "client_seconds": 1.5, "note": "x",
    })  # fmt: skip
    got = Cost().compute(Artifact("texts"), ctx_costs)
    assert got == {"floats_down_per_client_round": 82e6, "client_seconds": 1.5}


def test_the_tiny_profile_runs_every_text_metric(tmp_path):
    from benchmark.profiles import get_profile

    train, val, test = template_texts(40, 1), template_texts(12, 2), template_texts(12, 3)
    ctx = EvalContext(
        split=make_split(train, val, test, public=template_texts(20, 4, topic="tale")),
        profile=get_profile("tiny"),
        work_dir=tmp_path,
        downstream=DownstreamConfig(epochs=1, lr=3e-3, batch_size=16),
    )
    specs = [
        {"name": "next_token"},
        {"name": "fid"},
        {"name": "mauve", "kmeans_num_redo": 1},
        {"name": "dcr"},
        {"name": "mia", "reference": "public"},
    ]
    out = evaluate(Artifact("texts", texts=template_texts(32, 5)), ctx, specs)
    assert set(out["metrics"]) == {s["name"] for s in specs} and out["skipped"] == {}
    assert out["settings"]["fid"]["featurizer"].startswith("hashed-ngrams")
    assert 0.0 <= out["metrics"]["mia"]["calibrated_auc"] <= 1.0
