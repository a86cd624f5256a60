"""Paper 000's protocol as a side view of the same split: releases are fine-tuned from the
generic on-device LM, and the methods that start from the public start start from it too,
so the ε = 0 row is the checkpoint untouched."""

from types import SimpleNamespace

import pytest

from benchmark.evaluation.downstream import DownstreamConfig
from benchmark.instrument import weights_digest
from benchmark.profiles import get_profile
from benchmark.registry import METHODS
from benchmark.runner import downstream_config, evaluation_start
from benchmark.spec import SpecError, spec_from_dict
from benchmark.training import PUBLIC_START_SEED
from leaderboard.catalog import SUITES

TEXTS = [{"text": f"the river and the garden number {i} in the summer light"} for i in range(24)]


def test_the_view_keeps_the_split_and_changes_only_where_releases_start():
    bench, view = SUITES["bench"], SUITES["bench_paper000"]
    assert (view.source, view.split_options, view.profile) == (
        bench.source,
        bench.split_options,
        bench.profile,
    )
    assert view.downstream == {**bench.downstream, "start": "generic"}
    assert view.epsilons == bench.epsilons and view.methods == bench.methods


@pytest.mark.parametrize(
    "suite",
    [s for s in SUITES.values() if s.downstream.get("start") == "generic"],
    ids=lambda s: s.name,
)
def test_under_the_generic_start_every_method_with_a_public_start_skips_it(suite):
    """Paper 000's ε = 0 row is the checkpoint untouched: every method of a generic-start
    suite that fine-tunes on public texts first does so for zero epochs."""
    own_start = [
        m
        for m in suite.methods
        if "public_epochs" in METHODS.get(suite.method_of(m)).resolve_config("cpu", {})
    ]
    assert own_start
    for row in own_start:
        assert suite.method_params[suite.method_of(row)]["public_epochs"] == 0, row


def test_the_generic_start_is_the_checkpoint_and_the_public_start_is_not():
    profile = get_profile("tiny")
    ctx = SimpleNamespace(profile=profile, public=TEXTS, validation=TEXTS[:4])
    checkpoint = weights_digest(profile.ondevice_lm().new_model(PUBLIC_START_SEED))
    assert weights_digest(evaluation_start(ctx, "generic")()) == checkpoint
    assert weights_digest(evaluation_start(ctx, "public")()) != checkpoint


def test_an_unknown_start_is_refused_where_the_spec_is_read():
    with pytest.raises(ValueError, match="start must be one of"):
        DownstreamConfig(start="random")
    spec = spec_from_dict(
        {
            "split": {"path": "unused"},
            "method": {"name": "public_only"},
            "privacy": {"epsilon": 0, "delta": 1e-5},
            "evaluation": {"metrics": [], "downstream": {"start": "random"}},
        }
    )
    with pytest.raises(SpecError, match="start must be one of"):
        downstream_config(spec)
