"""The runner: budget enforcement, quarantine, and exact resume after a kill."""

import json
import math

import numpy as np
import pytest
import torch

from benchmark.artifact import Artifact
from benchmark.data import FederatedSplit
from benchmark.method import Method
from benchmark.privacy.errors import BudgetExceededError
from benchmark.registry import METHODS
from benchmark.runner import RunInterrupted, run
from benchmark.spec import spec_from_dict


class StubProfile:
    """Test double: the harness mechanics under test need no models."""

    name = "tiny"

    def describe(self):
        return {"profile": "stub"}


def text_length(client, payload):
    return np.array([np.mean([len(t) for t in client.texts]) / 100.0, payload["w"]])


@METHODS.register("test_noisy_rounds")
class NoisyRounds(Method):
    """Three noisy aggregate rounds plus method-side randomness (numpy and torch)."""

    name = "test_noisy_rounds"
    artifact_kind = "texts"
    configs = {"tiny": {"rounds": 3, "noise_multiplier": None, "secret_diagnostic": False}}

    def num_rounds(self):
        return self.config["rounds"]

    def setup(self, ctx):
        return {"history": []}

    def round(self, ctx, state, r):
        sigma = self.config["noise_multiplier"]
        if sigma is None:
            sigma = ctx.noise_for(steps=self.num_rounds())
        agg = ctx.pool.aggregate(
            text_length,
            {"w": float(r)},
            dim=2,
            clip_norm=1.0,
            noise_multiplier=sigma,
            label=f"round{r}",
        )
        if self.config["secret_diagnostic"]:
            exact = sum(1 for _ in range(ctx.pool.num_clients))
            ctx.diagnostics.write("exact_client_count_SECRET", exact, r)
        jitter = float(ctx.rng(r).normal()) + float(torch.randn(1))
        state["history"].append([*agg.noisy_sum.tolist(), jitter])
        return state

    def finish(self, ctx, state):
        return Artifact("texts", texts=[json.dumps(state["history"])])


def make_split():
    records = [{"text": f"verse {i} " * (1 + i % 5), "client_id": f"c{i % 10}"} for i in range(40)]
    return FederatedSplit(
        "toy",
        {"version": "v-test", "content_hash": "abc"},
        {"train": records, "validation": [], "test": [], "public": []},
    )


def spec(**overrides):
    data = {
        "split": {"path": "unused"},
        "method": {"name": "test_noisy_rounds", "params": overrides.pop("params", {})},
        "privacy": {"epsilon": 2.0, "delta": 1e-5, **overrides.pop("privacy", {})},
        "seed": 5,
    }
    return spec_from_dict(data)


def go(tmp_path, s, **kw):
    return run(s, runs_root=tmp_path, profile=StubProfile(), split=make_split(), **kw)


def test_run_writes_record_with_recomputed_epsilon(tmp_path):
    result = go(tmp_path, spec())
    privacy = result.record["privacy"]
    assert 1.5 < privacy["epsilon"] <= 2.0  # calibrated by the harness accountant
    assert len(privacy["ledger"]) == 3
    assert result.record["split"] == {"name": "toy", "version": "v-test", "content_hash": "abc"}
    assert result.record["costs"]["participations"] == 30
    on_disk = json.loads((result.run_dir / "result.json").read_text())
    assert on_disk["run_key"] == result.run_key


def test_budget_exceeded_names_both_numbers(tmp_path):
    with pytest.raises(BudgetExceededError, match=r"epsilon=\d+\.\d+ .*allows epsilon=0\.5"):
        go(tmp_path, spec(params={"noise_multiplier": 1.0}, privacy={"epsilon": 0.5}))


def test_epsilon_zero_allows_no_release(tmp_path):
    with pytest.raises(Exception, match="allows no private release"):
        go(tmp_path, spec(privacy={"epsilon": 0}))


def test_noise_free_diagnostic_lands_only_in_quarantine(tmp_path):
    result = go(tmp_path, spec(params={"secret_diagnostic": True}))
    quarantined = (result.run_dir / "private_diagnostics" / "diagnostics.jsonl").read_text()
    assert "exact_client_count_SECRET" in quarantined
    published = (result.run_dir / "result.json").read_text()
    assert "SECRET" not in published and "private_diagnostics" not in published


def test_killed_run_resumes_to_identical_result(tmp_path):
    full = go(tmp_path / "a", spec())
    with pytest.raises(RunInterrupted):
        go(tmp_path / "b", spec(), stop_after_round=1)
    torch.manual_seed(12345)  # a fresh process would have arbitrary global RNG state
    np.random.seed(999)
    resumed = go(tmp_path / "b", spec())
    assert resumed.artifact.texts == full.artifact.texts
    assert resumed.record["privacy"] == full.record["privacy"]
    assert resumed.record["costs"]["participations"] == full.record["costs"]["participations"]
    assert not math.isnan(json.loads(full.artifact.texts[0])[2][2])
