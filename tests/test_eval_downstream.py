"""Downstream training: metric definitions, determinism, and validation-based epoch selection."""

import numpy as np
import pytest
import torch
from test_eval_support import TinyProfile, make_split, template_texts

from benchmark.evaluation.downstream import (
    DownstreamConfig,
    evaluate_lm,
    evaluate_part,
    fit_and_select,
    sequence_losses,
    train_lm,
    train_with_selection,
)


@pytest.fixture(scope="module")
def setup():
    train = template_texts(96, seed=1)
    val, test = template_texts(24, seed=2), template_texts(24, seed=3)
    profile = TinyProfile(train + val + test + template_texts(24, seed=4, topic="tale"))
    return profile, make_split(train, val, test)


def manual_metrics(model, tokenizer, texts):
    """One text at a time, position by position: independent of the batched implementation."""
    hits1 = hits3 = n = 0
    ce = 0.0
    with torch.inference_mode():
        for text in texts:
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
            logits = model(input_ids=torch.tensor([ids])).logits[0]
            for pos in range(len(ids) - 1):
                row, target = logits[pos], ids[pos + 1]
                ranked = torch.argsort(row, descending=True).tolist()
                hits1 += ranked[0] == target
                hits3 += target in ranked[:3]
                ce -= float(row.log_softmax(-1)[target])
                n += 1
    return {"top1": hits1 / n, "top3": hits3 / n, "ce": ce / n}


def test_batched_metrics_match_a_per_position_computation(setup):
    profile, split = setup
    lm = profile.ondevice_lm()
    model = lm.new_model(0)
    train_lm(model, lm.tokenizer, split.texts("train")[:32], 1, 3e-3, 8, seed=0)
    texts = split.texts("test")
    got = evaluate_lm(model, lm.tokenizer, texts, max_length=64, batch_size=5)
    want = manual_metrics(model, lm.tokenizer, texts)
    for key in ("top1", "top3", "ce"):
        assert got[key] == pytest.approx(want[key], abs=1e-5)
    losses = sequence_losses(model, lm.tokenizer, texts + ["x"], batch_size=7)
    assert np.isnan(losses[-1]) and np.all(np.isfinite(losses[:-1]))
    assert np.average(losses[:-1]) == pytest.approx(want["ce"], rel=0.05)  # equal-length texts


def test_training_is_deterministic_and_learns(setup):
    profile, split = setup
    lm = profile.ondevice_lm()
    runs = []
    for _ in range(2):
        model = lm.new_model(7)
        train_lm(model, lm.tokenizer, split.texts("train"), 2, 3e-3, 16, seed=11)
        runs.append(evaluate_lm(model, lm.tokenizer, split.texts("test")))
    assert runs[0] == runs[1]
    start = evaluate_lm(lm.new_model(7), lm.tokenizer, split.texts("test"))
    assert runs[0]["top1"] > start["top1"] + 0.2
    assert runs[0]["ce"] < start["ce"]


def test_selection_reports_the_validation_best_epoch_not_the_test_best():
    val_by_epoch = [0.10, 0.40, 0.30, 0.20]  # best validation: epoch 2
    test_by_epoch = [0.15, 0.25, 0.35, 0.90]  # best test: epoch 4 (must not be reported)
    state = {"epoch": 0}
    test_calls = []

    def train(callback):
        for epoch in range(1, 5):
            state["epoch"] = epoch
            callback(epoch)

    def evaluate(part):
        epoch = state["epoch"]
        if part == "test":
            test_calls.append(epoch)
            return {"top1": test_by_epoch[epoch - 1]}
        return {"top1": val_by_epoch[epoch - 1]}

    selection = train_with_selection(
        train, evaluate, snapshot=lambda: state["epoch"], restore=lambda e: state.update(epoch=e)
    )
    assert selection.selected_epoch == 2
    assert selection.test == {"top1": 0.25}
    assert test_calls == [2]  # test is evaluated once, on the restored epoch
    assert [h["top1"] for h in selection.validation_history] == val_by_epoch


def test_selection_on_cross_entropy_minimises():
    values = iter([3.0, 2.0, 2.5])
    state = {}

    def train(callback):
        for epoch in (1, 2, 3):
            state["epoch"] = epoch
            callback(epoch)

    selection = train_with_selection(
        train,
        lambda part: {"ce": next(values)} if part == "validation" else {"ce": -state["epoch"]},
        snapshot=lambda: state["epoch"],
        restore=lambda e: state.update(epoch=e),
        key="ce",
    )
    assert selection.selected_epoch == 2 and selection.test == {"ce": -2}


def test_real_run_restores_the_selected_epoch(setup):
    profile, split = setup
    lm = profile.ondevice_lm()
    config = DownstreamConfig(epochs=4, lr=3e-3, batch_size=16)
    result = fit_and_select(
        lm.new_model(3), lm.tokenizer, split.texts("train")[:48], split, config, seed=5
    )
    history = [h["top1"] for h in result.validation_history]
    assert len(history) == 4
    assert result.selected_epoch == 1 + int(np.argmax(history))
    assert result.validation["top1"] == max(history)  # the selection score, on validation
    # Re-training for exactly the selected number of epochs reproduces the reported numbers.
    model = lm.new_model(3)
    train_lm(model, lm.tokenizer, split.texts("train")[:48], result.selected_epoch, 3e-3, 16, 5)
    assert evaluate_lm(model, lm.tokenizer, split.texts("test")) == result.test
    assert evaluate_lm(model, lm.tokenizer, split.texts("validation")) == result.validation
    # The per-client counts are the selected model's, on both parts (validation's from the
    # selected epoch's snapshot, not the last epoch's), and sum to the published top-1.
    for part, scores in (("test", result.test), ("validation", result.validation)):
        counts = result.clients[part]
        assert (scores, counts) == evaluate_part(model, lm.tokenizer, split.records(part))
        assert list(counts.clients) == sorted(split.by_client(part))
        assert sum(counts.hits) / sum(counts.tokens) == scores["top1"]


def test_per_client_counts_add_up_per_client(setup):
    profile, split = setup
    lm = profile.ondevice_lm()
    model = lm.new_model(0)
    records = split.records("test")
    scores, counts = evaluate_part(model, lm.tokenizer, records)
    for cid, hits, tokens in zip(counts.clients, counts.hits, counts.tokens, strict=True):
        own = [r["text"] for r in records if r["client_id"] == cid]
        alone = evaluate_lm(model, lm.tokenizer, own)
        assert (hits, tokens) == (round(alone["top1"] * alone["tokens"]), alone["tokens"])
    assert len(counts.clients_sha256()) == 64
    assert counts.to_json()["top1_hits"] == list(counts.hits)
    assert "clients" not in counts.to_json()  # the ids are not published, only their hash
