"""DP-FT (paper 003's private baseline, §5 and seed-003 §2): DP-SGD fine-tuning of the
downstream policy on the real private tuples, SFT then DPO, on disjoint halves.

- ``setup``: every tuple puts itself in half 0 or 1 by a hash of its own text (client
  side; the pool keeps the partition ``halves``). "Each user contributes to either SFT or
  DPO": the halves compose in parallel, so each stage runs at the full ε.
- round 0: DP-SGD SFT of the profile's ``preference_policy`` on half 0's chosen responses
  (the pool's ``dp_preference_finetune``, stage ``sft``): ``sft_epochs`` epochs at expected
  batch ``batch``, Poisson rate ``batch``/(n/2), clip ``clip``, Adam at ``sft_lr``.
- round 1: DP-SGD DPO of that model on half 1's pairs (stage ``dpo``, β ``beta``, the SFT
  model as reference, per-pair clipping): ``dpo_epochs`` epochs, Adam at ``dpo_lr``.
- ``finish``: the policy is released as a model; the evaluator scores it as it is.

Each stage's noise multiplier is solved for its own (q, T) at the whole budget. The
paper's Pythia-2.8B settings are the ``paper`` config (clip 0.1 from its grid, SFT lr 5e-5,
DPO lr 1e-5, batch 16, SFT 2 epochs, DPO 3). ε = ∞ (non-private fine-tuning on real data)
runs the same two stages without noise, on the same halves.

Choices the paper leaves open: the half sizes are taken as n/2 (a public number; the
split by hash is only about even), so a stage's rate is batch/(n/2); Adam on the noisy
gradients (opacus's DP-Adam; the paper names no optimiser); full fine-tuning with one
backward pass per tuple (the paper: Opacus ghost clipping under FSDP2, the same clipped
gradients); responses cut to ``max_completion_tokens``; DPO β 0.1 (not reported for DP-FT;
the downstream alignment's β).
"""

from __future__ import annotations

import copy
import hashlib
import math
from typing import Any

import numpy as np

from benchmark.api import Artifact, ClientBatch, Method, MethodContext, SpecError
from methods.fedlearn import save_model

HALVES = "halves"
PAPER = {
    "clip": 0.1,
    "batch": 16,
    "sft_epochs": 2,
    "sft_lr": 5e-5,
    "dpo_epochs": 3,
    "dpo_lr": 1e-5,
    "beta": 0.1,
    "max_completion_tokens": 256,
}


def half_of(batch: ClientBatch, payload: object) -> np.ndarray:
    """Half 0 or 1 per tuple, from a hash of its own prompt and responses."""
    out = []
    for client in batch.clients:
        r = client.records[0]
        text = "\x1e".join(str(r.get(k, "")) for k in ("prompt", "chosen", "rejected"))
        out.append([float(hashlib.blake2b(text.encode(), digest_size=1).digest()[0] % 2)])
    return np.array(out)


class DPFT(Method):
    name = "dp_ft"
    artifact_kind = "model"
    privacy_units = ("sample",)
    models = ("preference_policy",)
    configs = {
        "paper": PAPER,
        # cpu: one epoch each, sized for one core: docs/measurements/working-scale.md#dp_ft
        "cpu": {**PAPER, "sft_epochs": 1, "dpo_epochs": 1, "max_completion_tokens": 64},
        "tiny": {
            **PAPER,
            "batch": 4,
            "sft_epochs": 1,
            "dpo_epochs": 1,
            "sft_lr": 1e-3,
            "dpo_lr": 1e-3,
            "max_completion_tokens": 8,
        },
    }

    def num_rounds(self) -> int:
        return 2

    def setup(self, ctx: MethodContext) -> dict[str, Any]:
        self.require_counts("batch", "sft_epochs", "dpo_epochs", "max_completion_tokens")
        self.require_positive("clip", "sft_lr", "dpo_lr", "beta")
        if ctx.privacy.epsilon <= 0:
            raise SpecError("privacy.epsilon: 0 allows no private release; use base_model")
        ctx.pool.define_partition(HALVES, half_of, parts=2, batched=True)
        weights = ctx.profile.preference_policy().model.state_dict()
        return {"weights": {k: v.detach().to("cpu", copy=True) for k, v in weights.items()}}

    def round(self, ctx: MethodContext, state: dict[str, Any], round_index: int) -> dict[str, Any]:
        c = self.config
        stage, epochs, lr = (
            ("sft", c["sft_epochs"], c["sft_lr"]),
            ("dpo", c["dpo_epochs"], c["dpo_lr"]),
        )[round_index]
        half = max(ctx.pool.num_clients / 2, float(c["batch"]))
        sample_rate = c["batch"] / half
        steps = math.ceil(epochs * half / c["batch"])
        sigma = ctx.noise_for(steps=steps, sample_rate=sample_rate)
        weights = ctx.pool.dp_preference_finetune(
            state["weights"],
            stage=stage,
            partition=HALVES,
            part=round_index,
            noise_multiplier=sigma,
            clip_norm=c["clip"],
            sample_rate=sample_rate,
            batch_size=float(c["batch"]),
            steps=steps,
            lr=lr,
            beta=c["beta"],
            max_completion_tokens=c["max_completion_tokens"],
            label=f"dp_ft/{stage}",
        )
        return {"weights": weights}

    def finish(self, ctx: MethodContext, state: dict[str, Any]) -> Artifact:
        generator = ctx.profile.preference_policy()
        model = copy.deepcopy(generator.model).float()  # the pool trained float32 weights
        model.load_state_dict(state["weights"])
        return save_model(model, generator.tokenizer, ctx.work_dir / self.name)
