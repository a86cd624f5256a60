"""Classification: trained on synthetic labelled texts, scored on real labelled test records."""

import pytest
from test_eval_support import TinyProfile, make_split, records, template_texts

from benchmark.artifact import Artifact
from benchmark.evaluation.base import EvalContext, evaluate
from benchmark.evaluation.classification import train_and_score

TOPICS = ("farm", "city", "tale")


def labelled(n, seed):
    texts, labels = [], []
    for k, topic in enumerate(TOPICS):
        texts += template_texts(n, seed=seed + k, topic=topic)
        labels += [topic] * n
    return texts, labels


@pytest.fixture(scope="module")
def ctx(tmp_path_factory):
    test_texts, test_labels = labelled(20, seed=100)
    profile = TinyProfile(test_texts)
    split = make_split([], [], [])
    split.parts["test"] = [
        {**r, "label": lab} for r, lab in zip(records(test_texts, "test"), test_labels, strict=True)
    ]
    return EvalContext(split=split, profile=profile, work_dir=tmp_path_factory.mktemp("cls"))


def macro_f1_by_hand(truth, predicted):
    scores = []
    for c in sorted(set(truth)):
        tp = sum(t == c and p == c for t, p in zip(truth, predicted, strict=True))
        fp = sum(t != c and p == c for t, p in zip(truth, predicted, strict=True))
        fn = sum(t == c and p != c for t, p in zip(truth, predicted, strict=True))
        scores.append(0.0 if tp == 0 else 2 * tp / (2 * tp + fp + fn))
    return sum(scores) / len(scores)


def test_faithful_synthetic_labels_classify_real_text_perfectly(ctx):
    texts, labels = labelled(15, seed=1)
    out = evaluate(
        Artifact("labelled_texts", texts=texts, labels=labels), ctx, [{"name": "classification"}]
    )
    assert out["metrics"]["classification"]["accuracy"] == 1.0
    assert out["metrics"]["classification"]["macro_f1"] == 1.0
    assert out["settings"]["classification"]["classifier"] == "logistic_regression"


def test_swapped_labels_are_punished(ctx):
    texts, labels = labelled(15, seed=1)
    swapped = [{"farm": "city", "city": "farm"}.get(x, x) for x in labels]
    out = evaluate(
        Artifact("labelled_texts", texts=texts, labels=swapped), ctx, [{"name": "classification"}]
    )
    assert out["metrics"]["classification"]["accuracy"] == pytest.approx(1 / 3)


def test_single_class_synthetic_set_predicts_that_class_and_macro_f1_counts_missing_classes():
    x = [[0.0], [1.0], [2.0], [3.0]]
    truth = ["a", "b", "b", "c"]
    got = train_and_score(x[:2], ["b", "b"], x, truth)
    assert got["accuracy"] == 0.5
    assert got["macro_f1"] == pytest.approx(macro_f1_by_hand(truth, ["b"] * 4))  # (0+2/3+0)/3


def test_unlabelled_release_is_skipped(ctx):
    out = evaluate(Artifact("texts", texts=["a"]), ctx, [{"name": "classification"}])
    assert "labelled_texts" in out["skipped"]["classification"]


def test_a_field_of_composite_codes_is_its_own_task(tmp_path):
    """Paper 001 scores Yelp's category and rating separately: with ``field`` the classes
    are one field's values, and both tasks are recorded side by side under their labels."""
    texts, topics = labelled(15, seed=1)
    stars = {"farm": "5.0", "city": "1.0", "tale": "1.0"}
    codes = [f"Business Category: {t}, Review Stars: {stars[t]}" for t in topics]
    test_texts, test_topics = labelled(20, seed=100)
    split = make_split([], [], [])
    split.parts["test"] = [
        {**r, "label": f"Business Category: {t}, Review Stars: {stars[t]}"}
        for r, t in zip(records(test_texts, "test"), test_topics, strict=True)
    ]
    ctx = EvalContext(split=split, profile=TinyProfile(test_texts), work_dir=tmp_path)
    out = evaluate(
        Artifact("labelled_texts", texts=texts, labels=codes),
        ctx,
        [
            {"name": "classification", "label": "category", "field": "Business Category"},
            {"name": "classification", "label": "rating", "field": "Review Stars"},
        ],
    )
    assert out["metrics"]["category"]["accuracy"] == 1.0
    assert out["metrics"]["rating"]["accuracy"] == 1.0
    assert out["metrics"]["rating"]["n_test"] == 60.0
    assert out["settings"]["rating"]["field"] == "Review Stars"
    assert out["settings"]["rating"]["f1_average"] == "macro"
    missing = evaluate(
        Artifact("labelled_texts", texts=texts, labels=codes),
        ctx,
        [{"name": "classification", "field": "Anatomy"}],
    )
    assert "no labels for this task" in missing["skipped"]["classification"]
