"""The two reference points of every table: ε = 0 (public data only) and ε = ∞ (no privacy).

``public_only`` (paper 004 App. D.2 "c4-only"; paper 000's ε = 0 column with
``public_epochs: 0``): the profile's on-device LM fine-tuned on the split's public texts
with validation-based epoch selection (:func:`benchmark.training.public_start`). It reads no
private data, so the ledger stays empty and ε = 0 under any budget.

``nonprivate`` (paper 000 §5: "the downstream model finetuned directly on the private
training set centralized on the server with no noise"): the same public start, then
fine-tuned on all private training texts through ``ctx.pool.centralized`` (allowed only when
the budget is ε = ∞; it records a non-private release, so the ledger's ε is ∞). The epoch
is selected on the validation clients. ``paper`` uses paper 000's downstream settings
(AdamW, lr 2e-4, batch 160, 80 epochs, length 64); paper 004's ε = ∞ row instead trains on
an LLM-expanded private set (Expand-private), which needs the PrE-Text Expand step.

Both release the model (artifact kind ``model``). Starting ``nonprivate`` from the public
start (as paper 004 does) keeps the four model-releasing adapters on one starting point.

``base_model`` is the ε = 0 point of the preference track (paper 003 Table 1's ε = 0
column, "the base (fully private, non-finetuned) LLM"): it releases an empty preference
set, which the evaluator's alignment leaves untouched, so the policy scored is the
profile's generator as it is.
"""

from __future__ import annotations

from typing import Any

from benchmark.api import (
    PUBLIC_START_CONFIGS,
    Artifact,
    ClientData,
    FineTune,
    Method,
    MethodContext,
    fine_tune,
    public_start,
    validation_texts,
)
from methods.fedlearn import save_model

# The privacy units the reference rows (the bounds here, the oracle and generator_only
# controls) run under.
REFERENCE_UNITS = ("user", "sample", "central")


class Bound(Method):
    """A reference point of the gap-closed scale: no server rounds."""

    role = "bound"
    privacy_units = REFERENCE_UNITS

    def num_rounds(self) -> int:
        return 0


class PublicOnly(Bound):
    """ε = 0: the shared public starting point, released as is."""

    name = "public_only"
    artifact_kind = "model"
    models = ("ondevice_lm",)
    configs = PUBLIC_START_CONFIGS

    def finish(self, ctx: MethodContext, state: Any) -> Artifact:
        model = public_start(ctx, self.config)
        return save_model(model, ctx.profile.ondevice_lm().tokenizer, ctx.work_dir / self.name)


class NonPrivate(Bound):
    """ε = ∞: the public start fine-tuned on the centralised private training texts."""

    name = "nonprivate"
    artifact_kind = "model"
    models = ("ondevice_lm",)
    configs = {
        "tiny": {**PUBLIC_START_CONFIGS["tiny"], "epochs": 2, "lr": 2e-3, "batch_size": 16},
        "cpu": {**PUBLIC_START_CONFIGS["cpu"], "epochs": 3, "lr": 1e-3, "batch_size": 32},
        "paper": {**PUBLIC_START_CONFIGS["paper"], "epochs": 80, "lr": 2e-4, "batch_size": 160},
    }
    configs = {p: {**c, "max_length": 64} for p, c in configs.items()}

    def finish(self, ctx: MethodContext, state: Any) -> Artifact:
        model = public_start(ctx, self.config)
        tokenizer = ctx.profile.ondevice_lm().tokenizer
        cfg = FineTune(
            self.config["epochs"],
            self.config["lr"],
            self.config["batch_size"],
            self.config["max_length"],
        )
        validation, seed = validation_texts(ctx), ctx.seed

        def train_on_clients(clients: list[ClientData]) -> Any:
            """Client side (the ε = ∞ bound sees every client at once): the trained model
            comes back as the result, since on the isolated path it trains in the client
            worker, on a copy of ``model``."""
            texts = [t for c in clients for t in c.texts]
            fine_tune(model, tokenizer, texts, validation, cfg, seed)
            return model

        model = ctx.pool.centralized(train_on_clients, label=f"{self.name}/centralized-fine-tuning")
        return save_model(model, tokenizer, ctx.work_dir / self.name)


class BaseModel(Bound):
    """ε = 0 of the preference track: no pairs, so the downstream policy stays the base."""

    name = "base_model"
    artifact_kind = "preferences"
    configs = {"tiny": {}, "cpu": {}, "paper": {}}

    def finish(self, ctx: MethodContext, state: Any) -> Artifact:
        return Artifact(kind=self.artifact_kind, pairs=[])
