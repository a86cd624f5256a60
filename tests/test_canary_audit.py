"""The one-run canary audit end to end: canaries drawn from the split's real train units and
held out at random by the trusted side, scored on the release by the evaluator, a leaking
release caught, an unrelated one not."""

import numpy as np
import pytest
from test_eval_support import TinyProfile, random_word_texts, records, template_texts

from benchmark.artifact import Artifact
from benchmark.data import FederatedSplit, group_by_client
from benchmark.evaluation.base import EvalContext, evaluate
from benchmark.evaluation.downstream import DownstreamConfig
from benchmark.federation.canaries import audited_units, canary_count, plan_canaries

PUBLIC = template_texts(60, seed=4) + random_word_texts(40, seed=5)


def population(n: int, per_client: int = 1) -> dict[str, list[dict]]:
    return group_by_client(records(random_word_texts(n * per_client, 1), "train", per_client))


def test_the_plan_draws_real_units_from_the_seed_and_is_sized_by_the_population():
    units = population(1000)
    plan = plan_canaries(units, seed=7, delta=1e-5, blind=True)
    assert len(plan.unit_ids) == len(set(plan.unit_ids)) == canary_count(1000) == 100
    assert all(list(r) == units[u] for u, r in zip(plan.unit_ids, plan.units, strict=True))
    assert plan == plan_canaries(units, seed=7, delta=1e-5, blind=True)
    assert plan.unit_ids != plan_canaries(units, seed=8, delta=1e-5, blind=True).unit_ids
    assert 30 <= sum(plan.included) <= 70  # Bernoulli(1/2) bits
    assert canary_count(20_000) == 1000 and canary_count(99) == 0
    with pytest.raises(ValueError, match="privacy units"):
        plan_canaries(population(50), seed=7, delta=1e-5, blind=True)


def test_an_excluded_canary_is_held_out_and_an_included_one_is_an_unchanged_unit():
    units = population(300, per_client=3)
    plan = plan_canaries(units, seed=3, delta=1e-5, blind=True)
    run = audited_units(units, plan)
    assert set(run) == set(units) - plan.excluded
    assert len(plan.excluded) == len(plan.unit_ids) - sum(plan.included) > 0
    assert all(run[u] == units[u] for u in run)  # ids, texts, dates, labels: their own


def split_with(train: list[str]) -> FederatedSplit:
    parts = {
        "train": records(train, "train", per_client=1),
        "validation": records(PUBLIC[:8], "validation"),
        "test": records(PUBLIC[8:16], "test"),
        "public": records(PUBLIC, "public"),
    }
    return FederatedSplit("toy", {"version": "v-test"}, parts)


@pytest.fixture(scope="module")
def audited():
    train = random_word_texts(1000, seed=11, length=14)
    split = split_with(train)
    plan = plan_canaries(split.by_client("train"), seed=11, delta=1e-5, blind=True)
    profile = TinyProfile(PUBLIC + train[:300])
    downstream = DownstreamConfig(epochs=2, lr=5e-3, batch_size=8)

    def run(texts, tmp_path):
        ctx = EvalContext(split, profile, work_dir=tmp_path, downstream=downstream, canaries=plan)
        out = evaluate(Artifact("texts", texts=texts), ctx, [{"name": "canary"}])
        return out["metrics"]["canary"], out

    return plan, run


def test_a_release_that_copies_its_canaries_is_caught(audited, tmp_path):
    plan, run = audited
    leaked = [u[0]["text"] for u, i in zip(plan.units, plan.included, strict=True) if i]
    result, out = run(leaked + random_word_texts(20, seed=9), tmp_path)
    assert result["canaries"] == len(plan.unit_ids)
    assert 1.0 < result["epsilon_lower_bound"] <= result["epsilon_ceiling"]
    assert out["settings"]["canary"]["score"] == "copy"


def test_a_release_that_never_saw_them_shows_nothing(audited, tmp_path):
    _, run = audited
    result, _ = run(random_word_texts(60, seed=10), tmp_path)
    assert result["epsilon_lower_bound"] < 0.5


def test_without_canaries_the_metric_does_not_apply(tmp_path):
    profile = TinyProfile(PUBLIC)
    split = split_with(PUBLIC[:8])
    ctx = EvalContext(split, profile, work_dir=tmp_path)
    out = evaluate(Artifact("texts", texts=PUBLIC[:5]), ctx, [{"name": "canary"}])
    assert "canary" in out["skipped"]


def test_membership_inference_counts_only_the_units_the_run_trained_on(tmp_path):
    split = split_with(random_word_texts(300, seed=2))
    plan = plan_canaries(split.by_client("train"), seed=2, delta=1e-5, blind=True)
    ctx = EvalContext(split, TinyProfile(PUBLIC), work_dir=tmp_path, canaries=plan)
    held_out = {u[0]["text"] for u, i in zip(plan.units, plan.included, strict=True) if not i}
    assert held_out and set(ctx.member_texts()) == set(split.texts("train")) - held_out


def test_the_runner_holds_out_canaries_only_when_the_audit_is_listed(tmp_path):
    import doubles  # noqa: F401  (registers test_noisy_rounds)

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
    held_out = 1000 - audited["costs"]["participations"] / 3
    assert 0 < held_out < canary_count(1000)  # about half of the 100 canaries
    assert audited["metrics"]["canary.canaries"] == canary_count(1000)
    assert 0 <= audited["metrics"]["canary.epsilon_lower_bound"] <= 2.0


def test_on_preference_tuples_a_release_that_carries_canaries_is_caught(tmp_path):
    """Paper 003's track: canaries are real tuples, scored by the aligned policy's implicit
    margin and by the copy score. A release whose pairs are the included canaries shows
    them; no pairs, nothing."""
    from test_preference_track import FAST, tuples

    from benchmark.profiles import get_profile

    split = FederatedSplit(
        "prefs", {"version": "v-test"},
        {"train": tuples(500, 1), "validation": [], "test": tuples(24, 2), "public": []},
    )  # fmt: skip
    plan = plan_canaries(split.by_client("train"), seed=13, delta=1e-5, blind=True)
    ctx = EvalContext(
        split, get_profile("tiny"), work_dir=tmp_path,
        downstream=DownstreamConfig(alignment=FAST), canaries=plan,
    )  # fmt: skip
    pair = ("prompt", "chosen", "rejected")
    leaked = [
        {k: u[0][k] for k in pair} for u, i in zip(plan.units, plan.included, strict=True) if i
    ]
    caught = evaluate(Artifact("preferences", pairs=leaked), ctx, [{"name": "canary"}])
    assert caught["metrics"]["canary"]["epsilon_lower_bound"] > 0.5
    clean = evaluate(Artifact("preferences", pairs=[]), ctx, [{"name": "canary"}])
    assert clean["metrics"]["canary"]["epsilon_lower_bound"] == 0.0
    assert np.isfinite(clean["metrics"]["canary"]["canaries"])
