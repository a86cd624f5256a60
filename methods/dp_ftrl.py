"""DP-FTRL with tree aggregation and TreeRestart (paper 000 App. C.2, paper 004 App. D.2,
paper 002 §2 / App. C; Kairouz et al. 2021).

Algorithm and where it runs:

1. θ₀ ← the shared public start (:func:`benchmark.training.public_start`) — ``setup``.
2. Schedule: cohorts of ``cohort_size`` c (null: all N clients, full participation). The pool
   shuffles the clients once per tree into L = ⌊N / c⌋ disjoint cohorts, so a client
   contributes to one leaf per tree. Round t uses leaf t mod L of tree ⌊t / L⌋; a new tree
   is opened when the previous one is used up (TreeRestart: one tree per pass over the
   clients; with full participation every round is a one-leaf tree, paper 000 C.2 / 004 D.2).
   K = ⌈T / L⌉ trees are opened.
3. σ: the pool records each tree as one ledger entry with count = L, so the run's ledger is
   K compositions of a single-epoch tree with L leaves. Its RDP is K·α·⌈log₂(L+1)⌉/(2σ²)
   (dp-accounting), i.e. that of one such tree with noise σ/√K, so
   σ = √K · ``ctx.noise_for(steps=L, mechanism="tree_aggregation")`` meets the budget
   exactly (RDP accountant, the only one that accounts for trees) — ``setup``.
4. Each round: the pool runs ClientUpdate (local SGD, as in DP-FedAvg) on the next cohort,
   clips each delta to C, adds the leaf and returns the tree's noisy prefix sum
   (``ctx.pool.tree_step``). The noisy running sum over all trees is
   Sₜ = (final noisy sums of completed trees) + (current tree's noisy prefix).
5. FTRL step with momentum (DP-FTRLM): mₜ = β mₜ₋₁ + Sₜ / c, θₜ₊₁ = θ₀ + η_s mₜ.
   Unrolled, this is heavy-ball SGD on the noisy per-round increments Sₜ − Sₜ₋₁ (both give
   each round's mean delta the weight Σ_{k≤t−s} βᵏ), so a restart needs no special update:
   the completed tree's noisy total stays in S.
6. The best round on the validation clients is released (as DP-FedAvg).

Choices where the papers are silent:
- ``paper`` config = paper 000 C.2 ("similar to DP-FedAvg other than the noise
  multipliers"): 20 rounds, full participation, batch 2, length 64, client lr 0.01, clip 0.1
  (grid middles), server momentum 0.9 and server lr 1.0 (paper 004 D.2 / not stated).
- Paper 002's cross-device setting is :data:`CROSS_DEVICE_002` (pass it as method params):
  T = 1600, 100 clients per round, disjoint, 1 local epoch, batch 16, at most 256 samples
  per client; lrs/clip are the middles of its grids (server {0.05…2}, client {0.01…0.5},
  clip {0.1, 0.3, 0.4, 1}); momentum is not stated (0.9, Kairouz et al.'s default).
  With N ≥ 160,000 clients this is one tree; the pool records ⌊N/100⌋ leaves, which for
  N ≥ 204,800 means one more tree level (12 instead of 11) than the 1600 rounds used.
- ``cpu`` (KJV quickstart): 5 rounds of 8-client cohorts (one tree of ⌊N/8⌋ leaves; the pool
  holds a cohort's deltas in memory at once), clip 0.1, server lr 0.005: without sampling
  amplification the tree noise (std ≈ σC/c per coordinate per node) is large at c = 8, so
  the step is kept small. ``tiny``: 4 rounds of 2-client cohorts, an even smaller step.
- ε = ∞: the pool refuses noise-free trees, so cohorts are then Poisson samples of expected
  size c through ``ctx.pool.aggregate`` (a recorded non-private release), summed by the
  method; only the non-private bound runs this way.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from benchmark.method import MethodContext
from benchmark.spec import SpecError
from benchmark.training import PUBLIC_START_CONFIGS
from methods.fedlearn import FEDERATED_DEFAULTS, FederatedLM

CROSS_DEVICE_002: dict[str, Any] = {
    "rounds": 1600,
    "cohort_size": 100,
    "local_epochs": 1,
    "local_batch_size": 16,
    "max_samples_per_client": 256,
    "client_lr": 0.1,
    "server_lr": 0.5,
    "clip_norm": 0.3,
    "server_momentum": 0.9,
}


def tree_schedule(num_clients: int, cohort_size: int | None, rounds: int) -> tuple[int, int, int]:
    """(cohort size c, leaves per tree L, number of trees K) for ``rounds`` rounds."""
    c = num_clients if cohort_size is None else int(cohort_size)
    if not 1 <= c <= num_clients:
        raise SpecError(f"method.params.cohort_size: must be in [1, {num_clients}], got {c}")
    leaves = num_clients // c
    return c, leaves, math.ceil(rounds / leaves)


def ftrl_noise(ctx: MethodContext, leaves: int, trees: int) -> float:
    """Noise multiplier for ``trees`` restarts of a ``leaves``-leaf tree within the budget."""
    if ctx.privacy.accountant != "rdp":
        raise SpecError(
            f"privacy.accountant: dp_ftrl's tree aggregation is accounted by 'rdp' only, got "
            f"{ctx.privacy.accountant!r}"
        )
    return math.sqrt(trees) * ctx.noise_for(steps=leaves, mechanism="tree_aggregation")


class DPFTRL(FederatedLM):
    """DP-FTRL (tree aggregation, TreeRestart, momentum) on the on-device LM."""

    name = "dp_ftrl"
    configs = {
        "tiny": {
            **PUBLIC_START_CONFIGS["tiny"], **FEDERATED_DEFAULTS,
            "rounds": 4, "cohort_size": 2, "local_epochs": 1, "local_batch_size": 2,
            "client_lr": 0.05, "clip_norm": 0.1, "server_lr": 0.001, "server_momentum": 0.9,
        },
        "cpu": {
            **PUBLIC_START_CONFIGS["cpu"], **FEDERATED_DEFAULTS,
            "rounds": 5, "cohort_size": 8, "local_epochs": 1, "local_batch_size": 4,
            "client_lr": 0.05, "clip_norm": 0.1, "server_lr": 0.005, "server_momentum": 0.9,
        },
        "paper": {
            **PUBLIC_START_CONFIGS["paper"], **FEDERATED_DEFAULTS,
            "rounds": 20, "cohort_size": None, "local_epochs": 1, "local_batch_size": 2,
            "client_lr": 0.01, "clip_norm": 0.1, "server_lr": 1.0, "server_momentum": 0.9,
        },
    }  # fmt: skip

    def init_optimiser(self, params: torch.Tensor) -> dict[str, Any]:
        zeros = torch.zeros_like(params)
        return {"start": params, "momentum": zeros, "completed": zeros, "tree_prefix": zeros}

    def setup(self, ctx: MethodContext) -> dict[str, Any]:
        c, leaves, trees = tree_schedule(
            ctx.pool.num_clients, self.config["cohort_size"], self.num_rounds()
        )
        sigma = ftrl_noise(ctx, leaves, trees)  # before training: a bad spec fails fast
        return {**super().setup(ctx), "cohort_size": c, "leaves": leaves, "noise_multiplier": sigma}

    def _cohort_prefix(self, ctx: MethodContext, state: dict[str, Any], round_index: int):
        """The current tree's noisy prefix sum after adding this round's cohort."""
        tree, leaf = divmod(round_index, state["leaves"])
        name = f"{self.name}/tree{tree}"
        params = state["params"]
        payload = {"params": params}
        if state["noise_multiplier"] == 0:  # ε = ∞: non-private bound (see module docstring)
            aggregate = ctx.pool.aggregate(
                self.trainer(ctx),
                payload,
                dim=params.numel(),
                clip_norm=self.config["clip_norm"],
                noise_multiplier=0.0,
                sample_rate=state["cohort_size"] / ctx.pool.num_clients,
                label=f"{name}/leaf{leaf}",
            )
            return state["tree_prefix"] + torch.from_numpy(aggregate.noisy_sum).float()
        if leaf == 0:
            opened = ctx.pool.open_tree(
                name,
                dim=params.numel(),
                clip_norm=self.config["clip_norm"],
                noise_multiplier=state["noise_multiplier"],
                cohort_size=state["cohort_size"],
            )
            if opened != state["leaves"]:
                raise RuntimeError(f"pool opened {opened} leaves, schedule has {state['leaves']}")
        return torch.from_numpy(ctx.pool.tree_step(name, self.trainer(ctx), payload)).float()

    def round(self, ctx: MethodContext, state: dict[str, Any], round_index: int) -> dict[str, Any]:
        prefix = self._cohort_prefix(ctx, state, round_index)
        running = state["completed"] + prefix
        if (round_index + 1) % state["leaves"] == 0:  # tree used up: restart
            state["completed"], state["tree_prefix"] = running, torch.zeros_like(running)
        else:
            state["tree_prefix"] = prefix
        beta, lr = self.config["server_momentum"], self.config["server_lr"]
        state["momentum"] = beta * state["momentum"] + running / state["cohort_size"]
        state["params"] = state["start"] + lr * state["momentum"]
        self.select(ctx, state, round_index)
        return state
