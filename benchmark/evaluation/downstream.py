"""Downstream protocol of papers 000/004: fine-tune the on-device LM, select on validation.

The profile's on-device LM starts from its public starting point (``OnDeviceLM.new_model``),
is fine-tuned on the released synthetic texts, evaluated on the split's *validation* clients
after every epoch, and the best validation epoch is the one whose *test* numbers are
reported. The test clients are evaluated exactly once, on the selected model: POPri's and
PrE-Text's reference code select on the set they report, fedsynth does not.

Choices where the papers are silent (recorded in :class:`DownstreamConfig`):
- next-token accuracy and cross-entropy are micro-averaged over all predicted tokens of the
  part; each text is tokenised without special tokens and truncated to ``max_length``, and
  its first token is not predicted (there is no prefix to predict it from);
- per client of each scored part, the top-1 hits and predicted tokens are kept
  (:mod:`benchmark.evaluation.client_counts`), so the published micro-average can be
  recomputed and resampled over clients (paired bootstrap, :mod:`benchmark.evaluation.stats`);
- AdamW with a constant learning rate, gradient-norm clipping at ``max_grad_norm``;
- candidate epochs are 1..epochs (the untrained start is not a candidate); ties go to the
  earliest epoch; ``select_on="ce"`` minimises, any other key maximises.

``train_lm``, ``evaluate_lm`` and ``sequence_losses`` are public so that methods which train
the on-device model directly (public-only, non-private) use the very same loop.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from benchmark.artifact import Artifact
from benchmark.data import CLIENT_ID, TEXT, FederatedSplit
from benchmark.evaluation.client_counts import ClientCounts, summed_per_client
from benchmark.profiles.base import OnDeviceLM
from benchmark.profiles.seeding import seeded
from benchmark.progress import progress

LOWER_IS_BETTER = frozenset({"ce"})
EVALUATION_STARTS = ("public", "generic")


@dataclass(frozen=True)
class DownstreamConfig:
    """Hyper-parameters of downstream training (paper 000: lr 2e-4, max length 64)."""

    epochs: int = 3
    lr: float = 2e-4
    batch_size: int = 32
    eval_batch_size: int = 16
    max_length: int = 64
    select_on: str = "top1"
    max_grad_norm: float = 1.0
    weight_decay: float = 0.0
    # A released model is scored by the text metrics (FID, MAUVE, DCR) on this many texts
    # sampled from it (:mod:`benchmark.evaluation.model_samples`).
    model_samples: int = 1000
    sample_temperature: float = 1.0
    # Preference releases: the downstream policy's SFT + DPO (fields of
    # :class:`benchmark.preference_training.AlignmentConfig`; paper 003's defaults).
    alignment: dict[str, Any] = field(default_factory=dict)
    # What releases are fine-tuned from: ``public``, the on-device LM adapted to the split's
    # public part (the stronger bar a practitioner faces), or ``generic``, the on-device LM
    # as pretrained (paper 000's protocol, whose ε = 0 row is that checkpoint untouched).
    start: str = "public"

    def __post_init__(self) -> None:
        if self.start not in EVALUATION_STARTS:
            raise ValueError(f"start must be one of {EVALUATION_STARTS}, got {self.start!r}")


def encode(tokenizer: Any, texts: list[str], max_length: int) -> list[list[int]]:
    """Token ids per text, no special tokens, truncated to ``max_length``."""
    if not texts:
        return []
    enc = tokenizer(list(texts), add_special_tokens=False, truncation=True, max_length=max_length)
    return [list(ids) for ids in enc["input_ids"]]


def pad_right(seqs: list[list[int]], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad to the longest sequence; padded positions have mask 0 (their id is unused)."""
    width = max(len(s) for s in seqs)
    ids = torch.zeros((len(seqs), width), dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for row, seq in enumerate(seqs):
        ids[row, : len(seq)] = torch.tensor(seq, dtype=torch.long)
        mask[row, : len(seq)] = 1
    return ids.to(device), mask.to(device)


def model_device(model: Any) -> torch.device:
    return next(model.parameters()).device


def _length_sorted_batches(seqs: list[list[int]], batch_size: int) -> Iterator[list[int]]:
    """Indices in batches of similar length, so evaluation pads little."""
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
    for start in range(0, len(order), batch_size):
        yield order[start : start + batch_size]


def token_stats(
    model: Any, tokenizer: Any, texts: list[str], max_length: int = 64, batch_size: int = 16
) -> dict[str, np.ndarray]:
    """Per text: summed cross-entropy, top-1 and top-3 hits, and number of predicted tokens."""
    seqs = encode(tokenizer, texts, max_length)
    stats = {k: np.zeros(len(seqs), dtype=np.float64) for k in ("ce", "top1", "top3", "n")}
    usable = [i for i, s in enumerate(seqs) if len(s) >= 2]
    was_training, device = model.training, model_device(model)
    model.eval()
    with torch.inference_mode():
        for local in _length_sorted_batches([seqs[i] for i in usable], batch_size):
            rows = [usable[i] for i in local]
            ids, mask = pad_right([seqs[i] for i in rows], device)
            logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1].float()
            targets, valid = ids[:, 1:], mask[:, 1:].bool()
            row_of = torch.arange(len(rows), device=device).unsqueeze(1).expand_as(targets)[valid]
            flat_logits, flat_targets = logits[valid], targets[valid]
            ce = F.cross_entropy(flat_logits, flat_targets, reduction="none")
            top3 = flat_logits.topk(min(3, flat_logits.shape[-1]), dim=-1).indices
            hit1 = top3[:, 0] == flat_targets
            hit3 = (top3 == flat_targets.unsqueeze(1)).any(dim=1)
            n_rows = len(rows)
            for key, values in (("ce", ce), ("top1", hit1), ("top3", hit3)):
                per_row = torch.zeros(n_rows, dtype=torch.float64, device=device)
                per_row.index_add_(0, row_of, values.double())
                stats[key][rows] = per_row.cpu().numpy()
            stats["n"][rows] = valid.sum(dim=1).double().cpu().numpy()
    model.train(was_training)
    return stats


def evaluate_lm(
    model: Any, tokenizer: Any, texts: list[str], max_length: int = 64, batch_size: int = 16
) -> dict[str, float]:
    """Token-level next-token top-1/top-3 accuracy and mean cross-entropy (nats) on ``texts``."""
    return scores_of(token_stats(model, tokenizer, texts, max_length, batch_size))


def scores_of(stats: dict[str, np.ndarray]) -> dict[str, float]:
    """Micro-averages of :func:`token_stats` over every predicted token."""
    n = float(stats["n"].sum())
    if n == 0:
        raise ValueError("no text has two or more tokens; cannot evaluate next-token prediction")
    return {
        "top1": float(stats["top1"].sum() / n),
        "top3": float(stats["top3"].sum() / n),
        "ce": float(stats["ce"].sum() / n),
        "tokens": n,
    }


def client_counts(stats: dict[str, np.ndarray], client_ids: Sequence[str]) -> ClientCounts:
    """Per-text :func:`token_stats` summed per client (``client_ids`` aligned with the texts)."""
    return summed_per_client(stats["top1"], stats["n"], client_ids)


def evaluate_part(
    model: Any,
    tokenizer: Any,
    records: Sequence[dict[str, Any]],
    max_length: int = 64,
    batch_size: int = 16,
) -> tuple[dict[str, float], ClientCounts]:
    """:func:`evaluate_lm` on a part's records, plus its per-client counts (one pass)."""
    stats = token_stats(model, tokenizer, [r[TEXT] for r in records], max_length, batch_size)
    return scores_of(stats), client_counts(stats, [str(r[CLIENT_ID]) for r in records])


def sequence_losses(
    model: Any, tokenizer: Any, texts: list[str], max_length: int = 64, batch_size: int = 16
) -> np.ndarray:
    """Mean per-token cross-entropy of each text (NaN for texts with fewer than two tokens)."""
    stats = token_stats(model, tokenizer, texts, max_length, batch_size)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(stats["n"] > 0, stats["ce"] / np.maximum(stats["n"], 1), np.nan)


def train_lm(
    model: Any,
    tokenizer: Any,
    texts: list[str],
    epochs: int,
    lr: float,
    batch_size: int,
    seed: int,
    max_length: int = 64,
    on_epoch_end: Callable[[int], None] | None = None,
    max_grad_norm: float = 1.0,
    weight_decay: float = 0.0,
) -> Any:
    """Fine-tune a causal LM in place on ``texts``; deterministic given ``seed``.

    ``on_epoch_end(epoch)`` (1-based) runs after each epoch, e.g. for validation selection.
    Dropout draws from torch's RNG seeded with ``seed`` inside a fork, so the caller's global
    RNG state is left as it was.
    """
    seqs = [s for s in encode(tokenizer, texts, max_length) if len(s) >= 2]
    if not seqs:
        raise ValueError("no training text has two or more tokens")
    device = model_device(model)
    order_rng = torch.Generator().manual_seed(seed)
    optimiser = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    with seeded(seed):
        model.train()
        for epoch in range(1, epochs + 1):
            batches = torch.randperm(len(seqs), generator=order_rng).split(batch_size)
            for batch in progress(batches, f"train epoch {epoch}/{epochs}", unit="step"):
                ids, mask = pad_right([seqs[i] for i in batch.tolist()], device)
                labels = ids.masked_fill(mask == 0, -100)
                loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
                optimiser.zero_grad(set_to_none=True)
                loss.backward()
                if max_grad_norm > 0:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
                optimiser.step()
            if on_epoch_end is not None:
                on_epoch_end(epoch)
        model.eval()
    return model


def is_better(candidate: float, incumbent: float, key: str) -> bool:
    return candidate < incumbent if key in LOWER_IS_BETTER else candidate > incumbent


@dataclass
class Selection:
    """Outcome of validation-based epoch selection; ``test`` is of ``selected_epoch`` only."""

    selected_epoch: int
    validation_history: list[dict[str, float]]
    test: dict[str, float]


def train_with_selection(
    train: Callable[[Callable[[int], None]], None],
    evaluate: Callable[[str], dict[str, float]],
    snapshot: Callable[[], Any],
    restore: Callable[[Any], None],
    key: str = "top1",
) -> Selection:
    """Run ``train`` (which calls back after each epoch), keep the best validation state,
    restore it, then evaluate ``"test"`` once.

    ``evaluate(part)`` scores the current state on ``"validation"`` or ``"test"``. The
    callables are injected so the selection rule is testable without a model.
    """
    history: list[dict[str, float]] = []
    best: dict[str, Any] = {}

    def after_epoch(epoch: int) -> None:
        scores = evaluate("validation")
        history.append(scores)
        if not best or is_better(scores[key], best["score"], key):
            best.update(epoch=epoch, score=scores[key], state=snapshot())

    train(after_epoch)
    if not best:
        raise ValueError("training ran no epoch; nothing to select")
    restore(best["state"])
    return Selection(best["epoch"], history, evaluate("test"))


@dataclass
class DownstreamResult:
    """The selected downstream model and its numbers (``selected_epoch`` 0: not trained here).

    ``validation`` holds the selected model's scores on the validation clients: the number
    a suite selects hyper-parameters on (never ``test``). ``clients`` holds the selected
    model's per-client counts by part (``test``, ``validation``).
    """

    model: Any
    tokenizer: Any
    test: dict[str, float]
    selected_epoch: int
    validation: dict[str, float]
    validation_history: list[dict[str, float]] = field(default_factory=list)
    clients: dict[str, ClientCounts] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        return {
            "selected_epoch": self.selected_epoch,
            "validation_history": self.validation_history,
        }


def fit_and_select(
    model: Any,
    tokenizer: Any,
    texts: list[str],
    split: FederatedSplit,
    config: DownstreamConfig,
    seed: int,
) -> DownstreamResult:
    """Fine-tune ``model`` on ``texts``, pick the epoch on validation, score it on test.
    The selected epoch's validation counts travel with its snapshot, so ``clients`` holds
    the selected model's counts on both parts without scoring validation again."""
    counts: dict[str, ClientCounts] = {}

    def evaluate(part: str) -> dict[str, float]:
        scores, counts[part] = evaluate_part(
            model, tokenizer, split.records(part), config.max_length, config.eval_batch_size
        )
        return scores

    def train(callback: Callable[[int], None]) -> None:
        train_lm(
            model, tokenizer, texts, config.epochs, config.lr, config.batch_size, seed,
            config.max_length, callback, config.max_grad_norm, config.weight_decay,
        )  # fmt: skip

    def snapshot() -> dict[str, Any]:
        weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
        return {"weights": weights, "validation": counts["validation"]}

    def restore(state: dict[str, Any]) -> None:
        model.load_state_dict(state["weights"])
        counts["validation"] = state["validation"]

    selection = train_with_selection(
        train, evaluate, snapshot=snapshot, restore=restore, key=config.select_on
    )
    history = selection.validation_history
    return DownstreamResult(
        model,
        tokenizer,
        selection.test,
        selection.selected_epoch,
        history[selection.selected_epoch - 1],
        history,
        dict(counts),
    )


def run_downstream(
    artifact: Artifact,
    split: FederatedSplit,
    lm: OnDeviceLM,
    config: DownstreamConfig,
    seed: int,
    start_model: Callable[[], Any] | None = None,
    model_tokenizer: Any | None = None,
) -> DownstreamResult:
    """Downstream model of a release: the released model itself, or the public starting
    point fine-tuned on the released texts (the untrained start when the text set is empty).
    A released model is scored with ``model_tokenizer`` (the harness-built vocabulary it
    names) when given, else with the on-device LM's.
    """
    if artifact.kind == "preferences":
        raise ValueError("a preference release has no downstream LM; use the win-rate track")
    tokenizer = lm.tokenizer
    if artifact.kind == "model":
        from transformers import AutoModelForCausalLM

        import benchmark.profiles.small_lms  # noqa: F401  (registers paper 002's LSTM/transformer)

        model = AutoModelForCausalLM.from_pretrained(artifact.model_dir, dtype=torch.float32)
        model = model.to(lm.device).eval()  # scored where the profile's LMs live
        if model_tokenizer is not None:
            tokenizer = model_tokenizer
        if model.get_input_embeddings().num_embeddings < len(tokenizer):
            raise ValueError(
                f"released model has {model.get_input_embeddings().num_embeddings} token "
                f"embeddings, its tokenizer {len(tokenizer)} tokens"
            )
    else:
        model = start_model() if start_model else lm.new_model(seed)
        if artifact.texts:
            return fit_and_select(model, tokenizer, list(artifact.texts), split, config, seed)

    counts: dict[str, ClientCounts] = {}

    def score(part: str) -> dict[str, float]:
        scores, counts[part] = evaluate_part(
            model, tokenizer, split.records(part), config.max_length, config.eval_batch_size
        )
        return scores

    # A split without validation clients (paper 001's Yelp recipe) has no selection score.
    validation = score("validation") if split.texts("validation") else {"top1": math.nan}
    test = score("test")
    return DownstreamResult(
        model, tokenizer, test, selected_epoch=0, validation=validation, clients=counts
    )
