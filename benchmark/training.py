"""Centralised training of the on-device LM, and the public starting point every method shares.

Public starting point (papers 004 App. D.2 and 000 §5): paper 004 fine-tunes DistilGPT2 on
a public c4 subset ("c4-only", its ε = 0 row) and starts DP-FedAvg, DP-FTRL and its
ε = ∞ row from that model; paper 000's ε = 0 column is the public DistilGPT2 checkpoint
itself. fedsynth follows paper 004 for all four adapters: the profile's on-device LM
(``new_model(seed)``) is fine-tuned on the split's public texts with validation-based
epoch selection, and that model is the ε = 0 release (``public_only``) and the start of
``nonprivate``, ``dp_fedavg`` and ``dp_ftrl``. The ``cpu`` on-device LM is pretrained on
a generic public corpus (``benchmark/profiles/pretraining.py``), so this step adapts it to
the split's public part; the ``tiny`` one is random-init and would otherwise start from
noise.
``public_epochs: 0`` reproduces paper 000's convention (start = the profile's checkpoint).
The start is one fixed model per (profile, split, recipe), trained with
:data:`PUBLIC_START_SEED` whatever the run's seed — like the papers' single public
checkpoint: a run's seed varies what is trained on top of it, not the start, so every
method and seed of a suite shares it (and it is built once).

It lives in the harness (not in a method) because the evaluator also needs it: released
text sets are fine-tuned downstream from this same start.
"""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from benchmark.data import TEXT
from benchmark.evaluation.downstream import evaluate_lm, is_better, train_lm
from benchmark.files import atomic_write
from benchmark.method import MethodContext
from benchmark.profiles.cache import cache_dir
from benchmark.profiles.shipped import shipped_file

# Public starting point per profile; every adapter of this family merges these into its
# configs so that all four start from the same model. paper = paper 004 App. D.2 c4-only
# (AdamW lr 2e-4, batch 256, 20 epochs) at paper 000's sequence length 64. The cpu start
# is a 5.3 M model pretrained here and the tiny one random-init, hence larger lrs than
# paper 004's (which fine-tunes DistilGPT2, 82 M).
PUBLIC_START_CONFIGS: dict[str, dict[str, Any]] = {
    p: {**c, "max_length": 64}
    for p, c in {
        "tiny": {"public_epochs": 2, "public_lr": 2e-3, "public_batch_size": 16},
        # cpu: the locally pretrained dialogue LM adapted to the split's public part; still
        # gaining at epoch 3 (docs/measurements/working-scale.md#public-start), so 6 epochs at
        # 1e-3, the best validation epoch kept.
        "cpu": {"public_epochs": 6, "public_lr": 1e-3, "public_batch_size": 32},
        "paper": {"public_epochs": 20, "public_lr": 2e-4, "public_batch_size": 256},
    }.items()
}
SELECT_ON = "top1"  # next-token accuracy, the papers' reported metric
PUBLIC_START_SEED = 0
# Part of the cache key: files of the older format (a bare tensor, no key inside) are
# never read, and code that expects them never finds files of this one.
PUBLIC_START_FORMAT = "public-start/3"  # 3: keyed by the on-device LM's description only
# The profile description's entries a public start depends on (public_start_key).
START_INPUTS = ("ondevice_lm", "ondevice_tokenizer", "ondevice_corpus", "device")


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
    is cached (flat parameters, keyed by :func:`public_start_key`: the on-device LM, the
    texts, the fine-tuning settings and the seed) and the four adapters of a quickstart
    train it once. The cache is shared by every run on the host, so the file is loaded as
    tensors only and carries its key: a file made for other inputs, planted or corrupt is
    rebuilt, never used.
    """
    lm = ctx.profile.ondevice_lm()
    model = lm.new_model(PUBLIC_START_SEED)
    public, validation = [r[TEXT] for r in ctx.public], validation_texts(ctx)
    cfg = public_fine_tune(config)
    if cfg.epochs == 0 or not public:
        return model.eval()
    key = public_start_key(ctx.profile.describe(), lm.name, public, validation, cfg)
    path = cache_dir() / "public_start" / f"{key[:24]}.pt"
    for candidate in (path, shipped_file(f"public_start/{path.name}")):
        if candidate is not None and _load_cached_start(candidate, key, model):
            return model.eval()
    fine_tune(model, lm.tokenizer, public, validation, cfg, PUBLIC_START_SEED)
    try:
        buffer = io.BytesIO()
        torch.save({"key": key, "params": flat_params(model)}, buffer)
        atomic_write(path, buffer.getvalue())
    except PermissionError:  # an isolated method process reads the cache, never writes it
        pass
    return model.eval()


def public_start_key(
    profile: dict[str, str], lm_name: str, public: list[str], validation: list[str], cfg: FineTune
) -> str:
    """What a public start is made from: the on-device LM as the profile describes it (its
    shape and pretraining, tokenizer and corpus, and the device it trains on), never the
    profile's other models, so every generator is scored from the same start."""
    made_from = {k: v for k, v in profile.items() if k in START_INPUTS}
    parts = [PUBLIC_START_FORMAT, made_from, lm_name, public, validation, asdict(cfg)]
    return hashlib.sha256(
        json.dumps([*parts, PUBLIC_START_SEED], sort_keys=True).encode()
    ).hexdigest()


def _load_cached_start(path: Path, key: str, model: Any) -> bool:
    """Load the cached start into ``model`` if ``path`` holds one made for ``key`` (tensors
    only, the right size); False means build it."""
    if not path.is_file():
        return False
    try:
        stored = torch.load(path, weights_only=True)
    except Exception:  # a corrupt or foreign file is rebuilt, never trusted
        return False
    if not isinstance(stored, dict) or stored.get("key") != key:
        return False
    params = stored.get("params")
    size = sum(p.numel() for p in model.parameters())
    if not isinstance(params, torch.Tensor) or params.numel() != size:
        return False
    load_flat(model, params)
    return True


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
