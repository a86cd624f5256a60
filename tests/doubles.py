"""Test doubles shared by the harness tests: a model-free profile and a noisy-rounds method."""

import json

import numpy as np
import torch

from benchmark.artifact import Artifact
from benchmark.data import FederatedSplit
from benchmark.method import Method
from benchmark.registry import METHODS

# DP noise from the spec seed, not a secret one (a simulated guarantee): a run repeats
SEEDED = {"noise_seed": "spec", "guarantee": "simulated"}


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


@METHODS.register("test_post_processed")
class PostProcessed(NoisyRounds):
    """NoisyRounds whose release also carries ``tag``, a key it reads in ``finish`` only (as
    an LLM method reads its release sampling); with ``release_in_finish`` its ``finish``
    makes one more private release, so its declaration is false."""

    name = "test_post_processed"
    configs = {"tiny": {**NoisyRounds.configs["tiny"], "tag": "a", "release_in_finish": False}}
    post_processing = ("tag", "release_in_finish")

    def finish(self, ctx, state):
        if self.config["release_in_finish"]:
            ctx.pool.aggregate(
                text_length, {"w": 0.0}, dim=2, clip_norm=1.0, noise_multiplier=5.0, label="late"
            )
        history = json.dumps(state["history"])
        return Artifact("texts", texts=[history, self.config["tag"]])


def make_split():
    records = [{"text": f"verse {i} " * (1 + i % 5), "client_id": f"c{i % 10}"} for i in range(40)]
    return FederatedSplit(
        "toy",
        {"version": "v-test", "content_hash": "abc"},
        {"train": records, "validation": [], "test": [], "public": []},
    )
