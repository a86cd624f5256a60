"""On-device LM training shared by the model-releasing adapters (bounds, DP-FedAvg, DP-FTRL).

One place for: the public starting point all four adapters share, fine-tuning with
validation-based epoch selection, flattening a model's parameters to the vector the client
pool clips and noises, the client-side local SGD that returns a model delta, the server's
SGD with momentum, per-round model selection on the validation clients, and the saved-model
artifact.

Public starting point (papers 004 App. D.2 and 000 §5): paper 004 fine-tunes DistilGPT2 on
a public c4 subset ("c4-only", its ε = 0 row) and starts DP-FedAvg, DP-FTRL and its
ε = ∞ row from that model; paper 000's ε = 0 column is the public DistilGPT2 checkpoint
itself. fedsynth follows paper 004 for all four adapters: the profile's on-device LM
(``new_model(seed)``) is fine-tuned on the split's public texts with validation-based
epoch selection, and that model is the ε = 0 release (``public_only``) and the start of
``nonprivate``, ``dp_fedavg`` and ``dp_ftrl``. The ``cpu``/``tiny`` on-device LMs are
random-init GPT-2s, so without this step they would start from noise.
``public_epochs: 0`` reproduces paper 000's convention (start = the profile's checkpoint).
The step is deterministic given the seed, so the four adapters share the same start.
"""

from __future__ import annotations

import hashlib
import json
import os
from abc import abstractmethod
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmark.artifact import Artifact
from benchmark.data import TEXT
from benchmark.evaluation.downstream import (
    _pad,
    encode,
    evaluate_lm,
    is_better,
    model_device,
    train_lm,
)
from benchmark.federation.clients import ClientData
from benchmark.method import Method, MethodContext
from benchmark.profiles.cache import cache_dir

# Public starting point per profile; every adapter of this family merges these into its
# configs so that all four start from the same model. paper = paper 004 App. D.2 c4-only
# (AdamW lr 2e-4, batch 256, 20 epochs) at paper 000's sequence length 64. The cpu/tiny
# starts are random-init GPT-2s, hence larger lrs than paper 004's (which fine-tunes a
# pretrained DistilGPT2).
PUBLIC_START_CONFIGS: dict[str, dict[str, Any]] = {
    "tiny": {"public_epochs": 2, "public_lr": 2e-3, "public_batch_size": 16},
    "cpu": {"public_epochs": 3, "public_lr": 1e-3, "public_batch_size": 32},
    "paper": {"public_epochs": 20, "public_lr": 2e-4, "public_batch_size": 256},
}
SELECT_ON = "top1"  # next-token accuracy, the papers' reported metric
# Shared by DP-FedAvg and DP-FTRL: sequence length 64 (paper 000), validation selection after
# every round, no cap on samples per client (paper 002 caps at 256).
FEDERATED_DEFAULTS: dict[str, Any] = {
    "max_length": 64,
    "select_every": 1,
    "max_samples_per_client": None,
}


@dataclass(frozen=True)
class FineTune:
    """Centralised fine-tuning (AdamW, as in downstream training) with epoch selection."""

    epochs: int
    lr: float
    batch_size: int
    max_length: int = 64
    select_on: str = SELECT_ON


def public_fine_tune(config: dict[str, Any]) -> FineTune:
    return FineTune(
        config["public_epochs"],
        config["public_lr"],
        config["public_batch_size"],
        config["max_length"],
    )


def validation_texts(ctx: MethodContext) -> list[str]:
    return [r[TEXT] for r in ctx.validation]


def fine_tune(
    model: Any,
    tokenizer: Any,
    texts: list[str],
    validation: list[str],
    cfg: FineTune,
    seed: int,
) -> int:
    """Fine-tune ``model`` in place; keep the epoch best on ``validation``. Returns that epoch.

    Without validation texts the last epoch is kept; with no epochs or no texts the model is
    left as it is (epoch 0). The test part is never touched.
    """
    if cfg.epochs == 0 or not texts:
        return 0
    best: dict[str, Any] = {}

    def after_epoch(epoch: int) -> None:
        if not validation:
            return
        score = evaluate_lm(model, tokenizer, validation, cfg.max_length)[cfg.select_on]
        if not best or is_better(score, best["score"], cfg.select_on):
            best.update(epoch=epoch, score=score, params=flat_params(model))

    train_lm(
        model, tokenizer, texts, cfg.epochs, cfg.lr, cfg.batch_size, seed,
        cfg.max_length, after_epoch,
    )  # fmt: skip
    if not best:
        return cfg.epochs
    load_flat(model, best["params"])
    return int(best["epoch"])


def public_start(ctx: MethodContext, config: dict[str, Any]) -> Any:
    """The shared starting point: the profile's on-device LM fine-tuned on public texts.

    It reads public and validation data only, and is deterministic given its inputs, so it
    is cached (flat parameters, keyed by the profile's model ids, the texts, the fine-tuning
    settings and the seed) and the four adapters of a quickstart train it once.
    """
    lm = ctx.profile.ondevice_lm()
    model = lm.new_model(ctx.seed)
    public, validation = [r[TEXT] for r in ctx.public], validation_texts(ctx)
    cfg = public_fine_tune(config)
    if cfg.epochs == 0 or not public:
        return model.eval()
    key = hashlib.sha256(
        json.dumps(
            [ctx.profile.describe(), lm.name, public, validation, asdict(cfg), ctx.seed],
            sort_keys=True,
        ).encode()
    ).hexdigest()[:24]
    path = cache_dir() / "public_start" / f"{key}.pt"
    if path.exists():
        load_flat(model, torch.load(path, weights_only=True))
        return model.eval()
    fine_tune(model, lm.tokenizer, public, validation, cfg, ctx.seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp-{os.getpid()}")
    torch.save(flat_params(model), tmp)
    os.replace(tmp, path)
    return model.eval()


def flat_params(model: Any) -> torch.Tensor:
    """All parameters as one float32 CPU vector (tied weights counted once)."""
    return torch.cat([p.detach().reshape(-1).float().cpu() for p in model.parameters()])


def load_flat(model: Any, flat: torch.Tensor) -> None:
    """Copy ``flat`` into the model's parameters (copies: the model never aliases ``flat``)."""
    flat = torch.as_tensor(flat)
    offset = 0
    with torch.no_grad():
        for p in model.parameters():
            n = p.numel()
            p.copy_(flat[offset : offset + n].view_as(p))
            offset += n
    if offset != flat.numel():
        raise ValueError(f"parameter vector has {flat.numel()} entries, the model {offset}")


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

    Runs inside the pool's client scope; the model object is the device's working copy (one
    instance reused across clients: every call first loads the broadcast parameters).
    Shuffling and dropout draw from torch's global RNG, which the runner seeds per round.
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
                    ids, mask = _pad([seqs[i] for i in batch.tolist()], device)
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

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        self._model: Any = None

    def num_rounds(self) -> int:
        return int(self.config["rounds"])

    def model(self, ctx: MethodContext) -> Any:
        """The server's (and simulated devices') working model; rebuilt after a resume."""
        if self._model is None:
            self._model = ctx.profile.ondevice_lm().new_model(ctx.seed)
        return self._model

    def trainer(self, ctx: MethodContext) -> ClientTrainer:
        lm = ctx.profile.ondevice_lm()
        return ClientTrainer(self.model(ctx), lm.tokenizer, LocalTraining.from_config(self.config))

    def setup(self, ctx: MethodContext) -> dict[str, Any]:
        self._model = public_start(ctx, self.config)
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
        lm = ctx.profile.ondevice_lm()
        score = evaluate_lm(model, lm.tokenizer, validation, self.config["max_length"])[SELECT_ON]
        best = state["best"]
        if best is None or is_better(score, best["score"], SELECT_ON):
            state["best"] = {"round": round_index, "score": score, "params": state["params"]}

    def finish(self, ctx: MethodContext, state: dict[str, Any]) -> Artifact:
        params = state["best"]["params"] if state["best"] is not None else state["params"]
        model = self.model(ctx)
        load_flat(model, params)
        return save_model(model, ctx.profile.ondevice_lm().tokenizer, ctx.work_dir / self.name)


def save_model(model: Any, tokenizer: Any, directory: Path) -> Artifact:
    """Release a model: ``save_pretrained`` of the model and its tokenizer."""
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return Artifact("model", model_dir=str(directory))
