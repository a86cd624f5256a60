"""On-device LM training shared by the model-releasing adapters (bounds, DP-FedAvg, DP-FTRL).

One place for: the client-side local SGD that returns a model delta, the server's SGD with
momentum, per-round model selection on the validation clients, and the saved-model
artifact. The public starting point all four adapters share, centralised fine-tuning with
validation-based epoch selection and the flat parameter vector the client pool clips and
noises live in the harness (:mod:`benchmark.training`), because the evaluator uses them too.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmark.api import (
    SELECT_ON,
    Artifact,
    ClientData,
    Method,
    MethodContext,
    OnDeviceLM,
    encode,
    evaluate_lm,
    flat_params,
    is_better,
    load_flat,
    model_device,
    pad_right,
    public_start,
    validation_texts,
)

# Shared by DP-FedAvg and DP-FTRL: sequence length 64 (paper 000), validation selection after
# every round, no cap on samples per client (paper 002 caps at 256).
FEDERATED_DEFAULTS: dict[str, Any] = {
    "max_length": 64,
    "select_every": 1,
    "max_samples_per_client": None,
}
# The ``paper`` configs' client and server steps: paper 000 App. C.1's DP-FedAvg settings,
# which C.2 gives DP-FTRL too ("similar to DP-FedAvg other than the noise multipliers").
PAPER_000_STEPS: dict[str, Any] = {
    "local_epochs": 1,
    "local_batch_size": 2,
    "client_lr": 0.01,
    "clip_norm": 0.1,
    "server_lr": 1.0,
    "server_momentum": 0.9,
}


@dataclass(frozen=True)
class LocalTraining:
    """Client-side training: plain SGD, ``epochs`` passes over the client's own texts."""

    epochs: int
    batch_size: int
    lr: float
    max_length: int = 64
    max_samples: int | None = None  # cap per client (paper 002: 256); None = all

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> LocalTraining:
        return cls(
            config["local_epochs"],
            config["local_batch_size"],
            config["client_lr"],
            config["max_length"],
            config["max_samples_per_client"],
        )


class ClientTrainer:
    """The client-side function: load the broadcast parameters, run local SGD on the
    client's own texts, return the model delta (new − broadcast) as a float32 vector.

    Runs inside the pool's client scope; the model object is the simulated devices' working
    copy (one instance reused across clients: every call first loads the broadcast
    parameters), never the server's model, which would otherwise be left holding the last
    client's un-noised locally trained weights.
    Shuffling and dropout draw from torch's global RNG, which the pool seeds per client call
    (secret seed, release, client).
    The first ``max_samples`` texts of a client are used (records in split order).
    """

    def __init__(self, model: Any, tokenizer: Any, cfg: LocalTraining) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.cfg = cfg

    def _sequences(self, client: ClientData) -> list[list[int]]:
        def tokenize(c: ClientData) -> list[list[int]]:
            texts = c.texts[: self.cfg.max_samples]
            return [s for s in encode(self.tokenizer, texts, self.cfg.max_length) if len(s) >= 2]

        return client.memo(
            f"fedlearn/tokens/{self.cfg.max_length}/{self.cfg.max_samples}", tokenize
        )

    def __call__(self, client: ClientData, payload: dict[str, torch.Tensor]) -> np.ndarray:
        start = payload["params"]
        load_flat(self.model, start)
        seqs = self._sequences(client)
        if seqs:
            device = model_device(self.model)
            optimiser = torch.optim.SGD(self.model.parameters(), lr=self.cfg.lr)
            self.model.train()
            for _ in range(self.cfg.epochs):
                for batch in torch.randperm(len(seqs)).split(self.cfg.batch_size):
                    ids, mask = pad_right([seqs[i] for i in batch.tolist()], device)
                    labels = ids.masked_fill(mask == 0, -100)
                    loss = self.model(input_ids=ids, attention_mask=mask, labels=labels).loss
                    optimiser.zero_grad(set_to_none=True)
                    loss.backward()
                    optimiser.step()
            self.model.eval()
        return (flat_params(self.model) - start).numpy()


def momentum_step(
    params: torch.Tensor, momentum: torch.Tensor, update: torch.Tensor, lr: float, beta: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Server SGD with heavy-ball momentum on the averaged client delta ``update``.

    The pseudo-gradient is −update: ``m ← β m + update``, ``θ ← θ + lr · m`` (paper 004
    App. D.2: server momentum 0.9; β = 0, lr = 1 is plain FedAvg averaging).
    """
    momentum = beta * momentum + update
    return params + lr * momentum, momentum


class FederatedLM(Method):
    """Base of DP-FedAvg and DP-FTRL: public start, per-round validation selection, release.

    State (picklable, saved every round): ``params`` (current flat parameters), the
    subclass's optimiser state, and ``best`` (parameters and validation score of the best
    round so far; papers 000 App. C.1 / 004 App. D.2 report the best round on the
    evaluation set — fedsynth selects on the held-out validation clients, never on test).
    With ``select_every: 0`` or no validation clients the last round is released.
    """

    artifact_kind = "model"
    models = ("ondevice_lm",)

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        self._model: Any = None
        self._client_model: Any = None

    def num_rounds(self) -> int:
        return int(self.config["rounds"])

    def ondevice(self, ctx: MethodContext) -> OnDeviceLM:
        """The on-device LM family trained here (the profile's GPT-2-shaped one)."""
        return ctx.profile.ondevice_lm()

    def start_model(self, ctx: MethodContext) -> Any:
        """Round 0's model: the shared public start (:func:`benchmark.training.public_start`)."""
        return public_start(ctx, self.config)

    def model(self, ctx: MethodContext) -> Any:
        """The server's working model (validation scoring, release); rebuilt after a resume."""
        if self._model is None:
            self._model = self.ondevice(ctx).new_model(ctx.seed)
        return self._model

    def trainer(self, ctx: MethodContext) -> ClientTrainer:
        """The client-side function, on a model instance of its own (built once): client code
        never writes to the server's model object."""
        lm = self.ondevice(ctx)
        if self._client_model is None:
            self._client_model = lm.new_model(ctx.seed)
        return ClientTrainer(
            self._client_model, lm.tokenizer, LocalTraining.from_config(self.config)
        )

    def setup(self, ctx: MethodContext) -> dict[str, Any]:
        self._model = self.start_model(ctx)
        params = flat_params(self._model)
        return {"params": params, "best": None, **self.init_optimiser(params)}

    @abstractmethod
    def init_optimiser(self, params: torch.Tensor) -> dict[str, Any]:
        """The server optimiser's initial state for starting parameters ``params``."""

    def select(self, ctx: MethodContext, state: dict[str, Any], round_index: int) -> None:
        """Score this round's model on validation when due; keep the best round."""
        every = int(self.config["select_every"])
        last = round_index == self.num_rounds() - 1
        validation = validation_texts(ctx)
        if every <= 0 or not validation or not ((round_index + 1) % every == 0 or last):
            return
        model = self.model(ctx)
        load_flat(model, state["params"])
        lm = self.ondevice(ctx)
        score = evaluate_lm(model, lm.tokenizer, validation, self.config["max_length"])[SELECT_ON]
        ctx.diagnostics.write(f"validation_{SELECT_ON}", score, round_index)  # the learning curve
        best = state["best"]
        if best is None or is_better(score, best["score"], SELECT_ON):
            state["best"] = {"round": round_index, "score": score, "params": state["params"]}

    def finish(self, ctx: MethodContext, state: dict[str, Any]) -> Artifact:
        params = state["best"]["params"] if state["best"] is not None else state["params"]
        model = self.model(ctx)
        load_flat(model, params)
        return save_model(model, self.ondevice(ctx).tokenizer, ctx.work_dir / self.name)


def save_model(model: Any, tokenizer: Any, directory: Path) -> Artifact:
    """Release a model: ``save_pretrained`` of the model and its tokenizer."""
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return Artifact("model", model_dir=str(directory))
