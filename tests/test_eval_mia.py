"""Membership inference: a memorising model is caught, an untrained one is not; DCR likewise."""

import numpy as np
import pytest
from test_eval_support import (
    TinyProfile,
    make_split,
    random_word_texts,
    template_texts,
)

from benchmark.artifact import Artifact
from benchmark.evaluation.base import EvalContext, evaluate
from benchmark.evaluation.downstream import sequence_losses, train_lm
from benchmark.evaluation.mia import (
    attack_auc,
    calibrated_attack_auc,
    closest_distances,
    loss_attack_auc,
)

MEMBERS = random_word_texts(24, seed=1)
NONMEMBERS = random_word_texts(24, seed=2)


@pytest.fixture(scope="module")
def profile():
    return TinyProfile(MEMBERS + NONMEMBERS + random_word_texts(200, seed=3))


@pytest.fixture(scope="module")
def memorised(profile, tmp_path_factory):
    """A tiny model trained to overfit the members, saved as a released model."""
    lm = profile.ondevice_lm()
    model = lm.new_model(0)
    train_lm(model, lm.tokenizer, MEMBERS, epochs=20, lr=5e-3, batch_size=8, seed=0)
    path = tmp_path_factory.mktemp("released")
    model.save_pretrained(path)
    return model, path


def test_auc_helpers_against_hand_counted_pairs():
    # members {3, 1}, non-members {2, 0}: 3 of the 4 member/non-member pairs are ordered right
    assert attack_auc(np.array([3.0, 1.0]), np.array([2.0, 0.0])) == pytest.approx(0.75)
    assert loss_attack_auc(np.array([0.1, 0.2]), np.array([0.3, 0.4])) == 1.0
    # raw losses order the records wrongly, but calibration by a reference model fixes it
    member, nonmember = np.array([2.0, 2.1]), np.array([1.0, 1.1])
    assert loss_attack_auc(member, nonmember) == 0.0
    assert calibrated_attack_auc(member, nonmember, member + 1.0, nonmember + 0.1) == 1.0


def test_memorising_model_gives_auc_near_one_untrained_near_half(profile, memorised):
    tok = profile.ondevice_lm().tokenizer
    model, _ = memorised
    m, n = sequence_losses(model, tok, MEMBERS), sequence_losses(model, tok, NONMEMBERS)
    assert loss_attack_auc(m, n) > 0.95
    untrained = profile.ondevice_lm().new_model(5)
    m0 = sequence_losses(untrained, tok, MEMBERS)
    n0 = sequence_losses(untrained, tok, NONMEMBERS)
    assert abs(loss_attack_auc(m0, n0) - 0.5) < 0.2
    assert calibrated_attack_auc(m, n, m0, n0) > 0.95


def test_registered_mia_on_a_released_model(profile, memorised, tmp_path):
    _, path = memorised
    split = make_split(MEMBERS, NONMEMBERS[:12], NONMEMBERS[12:])
    ctx = EvalContext(split=split, profile=profile, work_dir=tmp_path)
    out = evaluate(Artifact("model", model_dir=str(path)), ctx, [{"name": "mia"}])
    mia = out["metrics"]["mia"]
    assert mia["loss_auc"] > 0.95 and mia["calibrated_auc"] > 0.95
    assert abs(mia["reference_loss_auc"] - 0.5) < 0.2  # the public start saw no member
    assert mia["n_members"] == mia["n_nonmembers"] == 24
    assert out["downstream"]["selected_epoch"] == 0  # a released model is not retrained


def test_closest_distances_match_brute_force():
    rng = np.random.default_rng(0)
    q, c = rng.normal(size=(7, 5)), rng.normal(size=(11, 5))
    want = np.array([min(np.linalg.norm(x - y) for y in c) for x in q])
    assert closest_distances(q, c, chunk=3) == pytest.approx(want, abs=1e-9)


def test_dcr_flags_copied_training_records(tmp_path):
    train, held_out = template_texts(60, seed=1), template_texts(60, seed=2)
    profile = TinyProfile(train + held_out)
    split = make_split(train, held_out[:30], held_out[30:])
    ctx = EvalContext(split=split, profile=profile, work_dir=tmp_path)
    copied = evaluate(Artifact("texts", texts=train), ctx, [{"name": "dcr"}])
    fresh = evaluate(Artifact("texts", texts=template_texts(60, seed=3)), ctx, [{"name": "dcr"}])
    assert copied["metrics"]["dcr"]["auc"] > 0.9
    assert abs(fresh["metrics"]["dcr"]["auc"] - 0.5) < 0.2
