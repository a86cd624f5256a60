"""The one-run canary audit end to end: canaries drawn and inserted by the trusted side,
scored on the release by the evaluator, a leaking release caught, an unrelated one not."""

import numpy as np
import pytest
from test_eval_support import TinyProfile, make_split, random_word_texts, template_texts

from benchmark.artifact import Artifact
from benchmark.evaluation.base import EvalContext, evaluate
from benchmark.evaluation.downstream import DownstreamConfig
from benchmark.federation.canaries import (
    MARKER_WORDS,
    canary_count,
    marker_vocabulary,
    plan_canaries,
    with_canaries,
)

PUBLIC = template_texts(60, seed=4) + random_word_texts(40, seed=5)


def test_the_plan_is_drawn_from_the_seed_and_sized_by_the_population():
    plan = plan_canaries(PUBLIC, 1000, seed=7, delta=1e-5, blind=True)
    assert len(plan.texts) == canary_count(1000) == 100
    assert plan == plan_canaries(PUBLIC, 1000, seed=7, delta=1e-5, blind=True)
    assert plan.texts != plan_canaries(PUBLIC, 1000, seed=8, delta=1e-5, blind=True).texts
    assert 30 <= sum(plan.included) <= 70  # Bernoulli(1/2) bits
    words = set(marker_vocabulary(PUBLIC))
    assert all(len(t.split()) == MARKER_WORDS and set(t.split()) <= words for t in plan.texts)
    assert canary_count(20_000) == 1000 and canary_count(99) == 0
    with pytest.raises(ValueError, match="privacy units"):
        plan_canaries(PUBLIC, 50, seed=7, delta=1e-5, blind=True)
    with pytest.raises(ValueError, match="distinct words"):
        plan_canaries(["a few words only"], 1000, seed=7, delta=1e-5, blind=True)


def test_only_included_canaries_join_and_nothing_of_an_excluded_one_does():
    units = {f"u{i:03d}": [{"text": f"real {i}", "client_id": f"u{i:03d}", "label": "x"}]
             for i in range(200)}  # fmt: skip
    plan = plan_canaries(PUBLIC, 1000, seed=3, delta=1e-5, blind=True)
    out = with_canaries(units, plan, seed=3)
    added = {k: v for k, v in out.items() if k not in units}
    assert all(out[k] == units[k] for k in units)
    assert len(added) == sum(plan.included)
    inside = sorted(r[0]["text"] for r in added.values())
    assert inside == sorted(t for t, i in zip(plan.texts, plan.included, strict=True) if i)
    assert all(r[0]["client_id"] == k and r[0]["label"] == "x" for k, r in added.items())
    # preference tuples: every text field is the canary's own words
    pairs = {k: [{**v[0], "prompt": "p", "chosen": "c", "rejected": "r"}] for k, v in units.items()}
    for unit_id, [record] in with_canaries(pairs, plan, seed=3).items():
        if unit_id in units:
            continue
        words = record["text"].split()
        assert record["prompt"].split() + record["chosen"].split() == words
        assert sorted(record["rejected"].split()) == sorted(record["chosen"].split())


@pytest.fixture(scope="module")
def audited():
    plan = plan_canaries(PUBLIC, 1000, seed=11, delta=1e-5, blind=True)
    corpus = PUBLIC + list(plan.texts) + random_word_texts(100, seed=6)
    profile = TinyProfile(corpus)
    split = make_split(random_word_texts(40, seed=7), PUBLIC[:8], PUBLIC[8:16], PUBLIC)
    downstream = DownstreamConfig(epochs=8, lr=5e-3, batch_size=8)

    def run(texts, tmp_path):
        ctx = EvalContext(split, profile, work_dir=tmp_path, downstream=downstream, canaries=plan)
        out = evaluate(Artifact("texts", texts=texts), ctx, [{"name": "canary"}])
        return out["metrics"]["canary"], out

    return plan, run


def test_a_release_that_copies_its_canaries_is_caught(audited, tmp_path):
    plan, run = audited
    leaked = [t for t, i in zip(plan.texts, plan.included, strict=True) if i]
    result, out = run(leaked + random_word_texts(20, seed=9), tmp_path)
    assert result["canaries"] == len(plan.texts)
    assert 1.0 < result["epsilon_lower_bound"] <= result["epsilon_ceiling"]
    assert result["correct"] <= result["guesses"]


def test_a_release_that_never_saw_them_shows_nothing(audited, tmp_path):
    _, run = audited
    result, _ = run(random_word_texts(60, seed=10), tmp_path)
    assert result["epsilon_lower_bound"] < 0.5


def test_without_canaries_the_metric_does_not_apply(tmp_path):
    profile = TinyProfile(PUBLIC)
    split = make_split(PUBLIC[:8], PUBLIC[:8], PUBLIC[8:16], PUBLIC)
    ctx = EvalContext(split, profile, work_dir=tmp_path)
    out = evaluate(Artifact("texts", texts=PUBLIC[:5]), ctx, [{"name": "canary"}])
    assert "canary" in out["skipped"] and np.isfinite(len(out["skipped"]))


def test_the_runner_inserts_canaries_only_when_the_audit_is_listed(tmp_path):
    import doubles  # noqa: F401  (registers test_noisy_rounds)

    from benchmark.data import FederatedSplit
    from benchmark.runner import run
    from benchmark.spec import spec_from_dict

    train = [{"text": t, "client_id": f"c{i:04d}"} for i, t in enumerate(template_texts(1000, 1))]
    public = [{"text": t, "client_id": "p"} for t in PUBLIC]
    split = FederatedSplit(
        "toy", {"version": "v-test", "content_hash": "abc"},
        {"train": train, "validation": public[:8], "test": public[8:16], "public": public},
    )  # fmt: skip

    class Profile(TinyProfile):
        name = "tiny"  # the public start's recipe is the tiny profile's

    profile = Profile(PUBLIC + template_texts(200, 2))

    def go(metrics):
        spec = spec_from_dict(
            {
                "split": {"path": "unused"},
                "method": {"name": "test_noisy_rounds", "params": {}},
                "privacy": {"epsilon": 2.0, "delta": 1e-5},
                "evaluation": {"metrics": metrics, "downstream": {"epochs": 1}},
                "seed": 5,
            }
        )
        return run(spec, runs_root=tmp_path, profile=profile, split=split).record

    plain = go([])
    audited = go([{"name": "canary", "settings": {}}])
    assert plain["costs"]["participations"] == 3 * 1000
    inserted = audited["costs"]["participations"] / 3 - 1000
    assert 0 < inserted < canary_count(1000)  # about half of the 100 canaries
    assert audited["metrics"]["canary.canaries"] == canary_count(1000)
    assert 0 <= audited["metrics"]["canary.epsilon_lower_bound"] <= 2.0


def test_on_preference_tuples_the_policy_margin_catches_a_release_that_carries_canaries(
    tmp_path,
):
    """Paper 003's track: canaries are tuples, scored by the aligned policy's implicit
    margin. A release whose pairs are the included canaries shows them; no pairs, nothing."""
    from test_preference_track import FAST, make_split

    from benchmark.federation.canaries import canary_pair
    from benchmark.profiles import get_profile

    plan = plan_canaries(PUBLIC, 1000, seed=13, delta=1e-5, blind=True)
    alignment = FAST
    ctx = EvalContext(
        make_split(), get_profile("tiny"), work_dir=tmp_path,
        downstream=DownstreamConfig(alignment=alignment), canaries=plan,
    )  # fmt: skip
    leaked = [canary_pair(t) for t, i in zip(plan.texts, plan.included, strict=True) if i]
    caught = evaluate(Artifact("preferences", pairs=leaked), ctx, [{"name": "canary"}])
    assert caught["metrics"]["canary"]["epsilon_lower_bound"] > 0.5
    clean = evaluate(Artifact("preferences", pairs=[]), ctx, [{"name": "canary"}])
    assert clean["metrics"]["canary"]["epsilon_lower_bound"] == 0.0
