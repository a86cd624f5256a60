"""The ε = 0 and ε = ∞ bounds: what they train on, their ledgers, their released models."""

import math

import pytest
import torch
from model_methods_support import client_texts, load_params, make_context, run_rounds

from benchmark.evaluation.downstream import evaluate_lm, train_lm
from benchmark.privacy.accountants import epsilon_from_ledger
from benchmark.privacy.errors import PrivacyError
from benchmark.privacy.ledger import NONPRIVATE
from benchmark.training import (
    FineTune,
    fine_tune,
    flat_params,
    load_flat,
    public_start,
    validation_texts,
)
from methods.bounds import NonPrivate, PublicOnly

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def release(method, ctx):
    state = run_rounds(method, ctx)
    return method.finish(ctx, state)


def validation_ce(ctx, params):
    lm = ctx.profile.ondevice_lm()
    model = lm.new_model(0)
    load_flat(model, params)
    return evaluate_lm(model, lm.tokenizer, validation_texts(ctx))["ce"]


def test_public_only_uses_no_private_data_and_learns_from_public(tmp_path):
    ctx = make_context(tmp_path, epsilon=0.0)
    method = PublicOnly(PublicOnly.resolve_config("tiny", {}))
    artifact = release(method, ctx)

    assert artifact.kind == "model"
    assert ctx.pool.ledger.releases == []
    assert epsilon_from_ledger(ctx.pool.ledger.releases, 1e-5) == 0.0
    released = load_params(artifact.model_dir)
    untrained = flat_params(ctx.profile.ondevice_lm().new_model(ctx.seed))
    assert not torch.equal(released, untrained)
    assert validation_ce(ctx, released) < validation_ce(ctx, untrained) - 0.1


def test_public_start_is_deterministic_and_cached_by_its_inputs(tmp_path, monkeypatch):
    ctx = make_context(tmp_path, epsilon=0.0)
    config = PublicOnly.resolve_config("tiny", {})
    starts = {}
    for cache in ("a", "b", "a"):  # a miss, an independent miss, then a hit
        monkeypatch.setenv("FEDSYNTH_CACHE", str(tmp_path / cache))
        starts.setdefault(cache, []).append(flat_params(public_start(ctx, config)))
    assert torch.equal(starts["a"][0], starts["b"][0])
    assert torch.equal(starts["a"][0], starts["a"][1])
    assert len(list((tmp_path / "a" / "public_start").glob("*.pt"))) == 1
    other = flat_params(public_start(ctx, {**config, "public_lr": 1e-3}))
    assert len(list((tmp_path / "a" / "public_start").glob("*.pt"))) == 2
    assert not torch.equal(other, starts["a"][0])


def test_public_epochs_zero_is_the_profile_checkpoint(tmp_path):
    ctx = make_context(tmp_path, epsilon=0.0)
    method = PublicOnly(PublicOnly.resolve_config("tiny", {"public_epochs": 0}))
    released = load_params(release(method, ctx).model_dir)
    assert torch.equal(released, flat_params(ctx.profile.ondevice_lm().new_model(ctx.seed)))


def test_fine_tune_keeps_the_best_validation_epoch(tmp_path):
    ctx = make_context(tmp_path, epsilon=0.0)
    lm = ctx.profile.ondevice_lm()
    texts, validation = [r["text"] for r in ctx.public], validation_texts(ctx)
    cfg = FineTune(epochs=3, lr=3e-2, batch_size=4, select_on="top1")
    # train_lm is deterministic given its seed, so k epochs reproduce the run's first k epochs
    scores, params = [], []
    for k in (1, 2, 3):
        model = lm.new_model(0)
        train_lm(model, lm.tokenizer, texts, k, cfg.lr, cfg.batch_size, seed=7)
        scores.append(evaluate_lm(model, lm.tokenizer, validation)["top1"])
        params.append(flat_params(model))
    model = lm.new_model(0)
    epoch = fine_tune(model, lm.tokenizer, texts, validation, cfg, seed=7)
    assert epoch == 1 + max(range(3), key=lambda i: (scores[i], -i))
    assert torch.allclose(flat_params(model), params[epoch - 1])


def test_nonprivate_trains_on_private_clients_and_spends_infinite_epsilon(tmp_path):
    ctx = make_context(tmp_path, epsilon=math.inf)
    method = NonPrivate(NonPrivate.resolve_config("tiny", {"epochs": 3, "lr": 1e-2}))
    artifact = release(method, ctx)

    assert [r.mechanism for r in ctx.pool.ledger.releases] == [NONPRIVATE]
    assert math.isinf(epsilon_from_ledger(ctx.pool.ledger.releases, 1e-5))
    lm = ctx.profile.ondevice_lm()
    start = public_start(ctx, method.config)
    trained = lm.new_model(0)
    load_flat(trained, load_params(artifact.model_dir))
    private = [t for i in range(8) for t in client_texts(i, 3)]
    ce_trained = evaluate_lm(trained, lm.tokenizer, private)["ce"]
    ce_start = evaluate_lm(start, lm.tokenizer, private)["ce"]
    assert ce_trained < ce_start - 0.3


def test_nonprivate_is_refused_under_a_finite_budget(tmp_path):
    ctx = make_context(tmp_path, epsilon=8.0)
    method = NonPrivate(NonPrivate.resolve_config("tiny", {}))
    with pytest.raises(PrivacyError, match="only allowed in a non-private run"):
        release(method, ctx)
    assert ctx.pool.ledger.releases == []


def test_the_public_start_is_keyed_by_the_on_device_lm_not_the_generator():
    """Every generator (cpu and cpu-gemma) is scored from one start: the profile's other
    models are not part of its key, the on-device LM and the device are."""
    from benchmark.training import FineTune, public_start_key

    cfg = FineTune(epochs=1, lr=1e-3, batch_size=4)
    smol = {"profile": "cpu", "generator": "SmolLM2", "ondevice_lm": "gpt2 (4 layers)"}
    key = public_start_key(smol, "lm", ["a public text"], ["a validation text"], cfg)
    gemma = {**smol, "profile": "cpu-gemma", "generator": "Gemma 3 270M"}
    assert public_start_key(gemma, "lm", ["a public text"], ["a validation text"], cfg) == key
    for changed in ({"ondevice_lm": "gpt2 (6 layers)"}, {"device": "cuda"}):
        other = {**smol, **changed}
        assert public_start_key(other, "lm", ["a public text"], ["a validation text"], cfg) != key
