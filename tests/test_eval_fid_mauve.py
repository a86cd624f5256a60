"""FID against closed forms, MAUVE on known distributions, and both as registered metrics."""

from dataclasses import replace

import numpy as np
import pytest
from scipy.linalg import sqrtm
from test_eval_support import TinyProfile, make_split, template_texts

from benchmark.artifact import Artifact
from benchmark.evaluation.base import EvalContext, evaluate
from benchmark.evaluation.downstream import train_lm
from benchmark.evaluation.fid import fid_from_features, frechet_distance
from benchmark.evaluation.mauve_metric import mauve_from_features


def closed_form_scipy(mu1, s1, mu2, s2):
    """The textbook formula with scipy's general matrix square root."""
    return float(np.sum((mu1 - mu2) ** 2) + np.trace(s1 + s2 - 2 * np.real(sqrtm(s1 @ s2))))


def random_cov(rng, d):
    a = rng.normal(size=(d, d))
    return a @ a.T / d + 0.1 * np.eye(d)


def test_frechet_distance_of_diagonal_gaussians_is_the_textbook_sum():
    mu1, mu2 = np.array([0.0, 1.0, 2.0]), np.array([1.0, 1.0, 0.0])
    v1, v2 = np.array([1.0, 4.0, 9.0]), np.array([4.0, 1.0, 1.0])
    want = np.sum((mu1 - mu2) ** 2) + np.sum((np.sqrt(v1) - np.sqrt(v2)) ** 2)  # = 5 + 1+1+4
    assert want == pytest.approx(11.0)
    assert frechet_distance(mu1, np.diag(v1), mu2, np.diag(v2)) == pytest.approx(want, abs=1e-10)


def test_frechet_distance_matches_scipy_on_full_covariances():
    rng = np.random.default_rng(0)
    for d in (2, 8, 32):
        mu1, mu2 = rng.normal(size=d), rng.normal(size=d)
        s1, s2 = random_cov(rng, d), random_cov(rng, d)
        want = closed_form_scipy(mu1, s1, mu2, s2)
        assert frechet_distance(mu1, s1, mu2, s2) == pytest.approx(want, rel=1e-8)


def test_fid_of_samples_converges_to_the_population_value():
    rng = np.random.default_rng(1)
    d = 6
    mu1, mu2 = np.zeros(d), np.full(d, 0.5)
    s1, s2 = random_cov(rng, d), random_cov(rng, d)
    x = rng.multivariate_normal(mu1, s1, size=40_000)
    y = rng.multivariate_normal(mu2, s2, size=40_000)
    assert fid_from_features(x, y) == pytest.approx(closed_form_scipy(mu1, s1, mu2, s2), rel=0.03)


def test_identical_sets_give_zero_even_with_singular_covariance():
    rng = np.random.default_rng(2)
    for n, d in ((500, 16), (20, 384)):  # the second has rank 19 < 384
        x = rng.normal(size=(n, d)).astype(np.float32)
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        assert fid_from_features(x, x) == pytest.approx(0.0, abs=1e-8)
        assert fid_from_features(x, x[::-1]) == pytest.approx(0.0, abs=1e-8)
        assert np.isfinite(fid_from_features(x, rng.normal(size=(n, d))))


def test_mauve_is_one_for_identical_sets_and_low_for_shifted_ones():
    rng = np.random.default_rng(3)
    p = rng.normal(size=(300, 16))
    assert mauve_from_features(p, p)["mauve"] == pytest.approx(1.0, abs=1e-6)
    same = mauve_from_features(p, rng.normal(size=(300, 16)))["mauve"]
    shifted = mauve_from_features(p, rng.normal(loc=1.0, size=(300, 16)))["mauve"]
    assert same > 0.8 and shifted < 0.2


@pytest.fixture(scope="module")
def ctx(tmp_path_factory):
    farm = template_texts(300, seed=1)
    test = template_texts(300, seed=2)
    profile = TinyProfile(farm + test + template_texts(50, seed=3, topic="tale"))
    split = make_split(farm, template_texts(20, seed=4), test)
    return EvalContext(split=split, profile=profile, work_dir=tmp_path_factory.mktemp("fm"))


def test_registered_fid_and_mauve_rank_a_matching_set_above_an_off_topic_set(ctx):
    specs = [{"name": "fid"}, {"name": "mauve", "max_samples": 300}]
    same = evaluate(Artifact("texts", texts=ctx.split.texts("test")), ctx, specs)
    near = evaluate(Artifact("texts", texts=template_texts(300, seed=9)), ctx, specs)
    off = evaluate(Artifact("texts", texts=template_texts(300, seed=9, topic="tale")), ctx, specs)
    assert same["metrics"]["fid"]["fid"] == pytest.approx(0.0, abs=1e-8)
    assert same["metrics"]["mauve"]["mauve"] == pytest.approx(1.0, abs=1e-6)
    assert near["metrics"]["fid"]["fid"] < off["metrics"]["fid"]["fid"]
    assert near["metrics"]["mauve"]["mauve"] > 0.5 > off["metrics"]["mauve"]["mauve"]
    settings = same["settings"]["mauve"]
    assert settings["featurizer"] == "hash-bow-64" and settings["num_buckets"] == "auto"
    assert settings["max_samples"] == 300 and "mauve_text" in settings
    assert same["settings"]["fid"]["featurizer"] == "hash-bow-64"


def test_too_small_text_releases_are_skipped_with_a_reason(ctx):
    one = evaluate(Artifact("texts", texts=["one text"]), ctx, [{"name": "fid"}, {"name": "mauve"}])
    assert "at least 2" in one["skipped"]["fid"] and "at least 2" in one["skipped"]["mauve"]
    out = evaluate(Artifact("preferences"), ctx, [{"name": "fid"}])
    assert "fid applies to" in out["skipped"]["fid"]


def release_model(ctx, texts, directory):
    """A released on-device model: the tiny LM trained on ``texts``."""
    lm = ctx.profile.ondevice_lm()
    model = train_lm(lm.new_model(0), lm.tokenizer, texts, 6, 3e-3, 16, seed=0)
    model.save_pretrained(directory)
    return Artifact("model", model_dir=str(directory))


def test_model_releases_are_scored_on_texts_sampled_from_them(ctx, tmp_path):
    cfg = replace(ctx.downstream, model_samples=120)
    fresh = EvalContext(split=ctx.split, profile=ctx.profile, work_dir=tmp_path, downstream=cfg)
    on_topic = release_model(fresh, template_texts(300, seed=5), tmp_path / "farm")
    off_topic = release_model(fresh, template_texts(300, seed=5, topic="tale"), tmp_path / "tale")
    specs = [{"name": "fid"}, {"name": "dcr", "n_samples": 16}]
    near, far = evaluate(on_topic, fresh, specs), evaluate(off_topic, fresh, specs)
    assert near["model_samples"]["source"] == "the released model"
    assert 100 <= near["metrics"]["fid"]["n_synthetic"] <= 120
    assert near["metrics"]["fid"]["fid"] < far["metrics"]["fid"]["fid"]
    assert "auc" in near["metrics"]["dcr"]
    again = EvalContext(split=ctx.split, profile=ctx.profile, work_dir=tmp_path, downstream=cfg)
    assert again.release_texts(on_topic, "fid") == fresh.release_texts(on_topic, "fid")


def test_mauve_can_featurise_with_a_causal_lm_as_paper_001(tmp_path):
    """``features: conditional_lm``: the last hidden state at the last token of the
    profile's conditional LM (GPT-2 in ``paper``); here the tiny profile's."""
    from benchmark.profiles import get_profile

    test = template_texts(40, seed=2)
    test[0] = " ".join(["word"] * 400)  # longer than the tiny model's 128-token context
    ctx = EvalContext(
        split=make_split(template_texts(40, seed=1), [], test),
        profile=get_profile("tiny"),
        work_dir=tmp_path,
    )
    spec = [{"name": "mauve", "features": "conditional_lm", "kmeans_num_redo": 1}]
    same = evaluate(Artifact("texts", texts=test), ctx, spec)
    assert same["metrics"]["mauve"]["mauve"] == pytest.approx(1.0, abs=1e-6)
    settings = same["settings"]["mauve"]
    assert settings["features"] == "conditional_lm" and settings["featurizer"].startswith("gpt2(")
    assert settings["max_text_tokens"] == 1024
