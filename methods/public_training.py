"""Public training of paper 002's on-device LM: the LM loss plus optional LLM distillation,
and the distribution-matching selection of public records.

L_pub = L_LM + β · L_KD (paper 002 §4, App. B.3), L_KD = CE(z_S / t, z_T / t) over the
teacher's stored top-k entries (:mod:`benchmark.profiles.teacher_corpus`). Adam at a
constant lr, batches drawn without replacement and reshuffled every pass, for a fixed
number of *steps* (the paper's unit: 1,400K steps pre-training, 100k / 8k distillation);
gradients clipped at ``max_grad_norm`` (the paper clips; the value is not stated: 1.0).

Distribution matching (§5, Algorithm 1 lines 4–11): each public record's score is its
mean-token log p_priv under the DP checkpoint plus its mean-token log p_pub under the
public LLM; the top ⌈q·|D|⌉ records are kept. Records too short to score (fewer than two
tokens) are never selected. Ties go to the earlier record.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from benchmark.api import TeacherCorpus, model_device, pad_right, seeded


@dataclass(frozen=True)
class PublicTraining:
    """One public training phase (pre-training or mid-training)."""

    steps: int
    batch_size: int
    lr: float
    distill_beta: float = 0.0  # 0: LM loss only
    temperature: float = 1.0
    max_grad_norm: float = 1.0


def kd_loss(
    student_logits: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_logits: torch.Tensor,
    valid: torch.Tensor,
    temperature: float = 1.0,
) -> torch.Tensor:
    """CE(z_S / t, z_T / t) over the teacher's top-k entries, mean over ``valid`` positions.

    ``student_logits`` (B, L, V) predict the next token at each of L positions, ``topk_ids``
    and ``topk_logits`` are (B, L, k), ``valid`` (B, L) bool. The teacher distribution is the
    softmax of its k kept logits (the paper does not say how top-k becomes a distribution).
    """
    teacher = (topk_logits / temperature).softmax(-1)
    student = (student_logits / temperature).log_softmax(-1).gather(-1, topk_ids)
    return -(teacher * student).sum(-1)[valid].mean()


def _teacher_batch(
    corpus: TeacherCorpus, rows: list[int], width: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """The rows' top-k ids/logits right-padded to ``width`` − 1 predicted positions."""
    k = corpus.topk_ids[rows[0]].shape[1]
    ids = torch.zeros((len(rows), width - 1, k), dtype=torch.long)
    logits = torch.zeros((len(rows), width - 1, k))
    for j, row in enumerate(rows):
        n = corpus.topk_ids[row].shape[0]
        ids[j, :n] = corpus.topk_ids[row]
        logits[j, :n] = corpus.topk_logits[row]
    return ids.to(device), logits.to(device)


def train_public(
    model: Any,
    seqs: list[list[int]],
    rows: list[int],
    cfg: PublicTraining,
    seed: int,
    corpus: TeacherCorpus | None = None,
) -> dict[str, float]:
    """Train ``model`` in place for ``cfg.steps`` steps on ``seqs[rows]`` (token ids).

    With ``cfg.distill_beta`` > 0, ``corpus`` must hold the teacher's top-k for the same
    token ids. Returns the mean loss terms of the last pass (for the run's diagnostics).
    """
    rows = [r for r in rows if len(seqs[r]) >= 2]
    if cfg.steps <= 0 or not rows:
        return {"steps": 0.0}
    if cfg.distill_beta > 0 and corpus is None:
        raise ValueError("distillation needs the teacher corpus")
    device = model_device(model)
    order = torch.Generator().manual_seed(seed)
    optimiser = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    totals = {"lm": 0.0, "kd": 0.0, "n": 0}
    step = 0
    with seeded(seed):
        model.train()
        while step < cfg.steps:
            for batch in torch.randperm(len(rows), generator=order).split(cfg.batch_size):
                if step == cfg.steps:
                    break
                chosen = [rows[i] for i in batch.tolist()]
                ids, mask = pad_right([seqs[r] for r in chosen], device)
                labels = ids.masked_fill(mask == 0, -100)
                out = model(input_ids=ids, attention_mask=mask, labels=labels)
                loss, kd = out.loss, torch.zeros(())
                if cfg.distill_beta > 0:
                    topk_ids, topk_logits = _teacher_batch(corpus, chosen, ids.shape[1], device)
                    valid = mask[:, 1:].bool()
                    kd = kd_loss(out.logits[:, :-1], topk_ids, topk_logits, valid, cfg.temperature)
                    loss = loss + cfg.distill_beta * kd
                optimiser.zero_grad(set_to_none=True)
                loss.backward()
                if cfg.max_grad_norm > 0:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
                optimiser.step()
                step += 1
                totals["lm"] += out.loss.item()
                totals["kd"] += kd.item()
                totals["n"] += 1
        model.eval()
    n = max(totals["n"], 1)
    return {"steps": float(step), "lm_loss": totals["lm"] / n, "kd_loss": totals["kd"] / n}


def top_fraction(scores: np.ndarray, fraction: float) -> list[int]:
    """Indices of the ⌈fraction · n⌉ highest finite scores (ties: earlier index first)."""
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    finite = np.flatnonzero(np.isfinite(scores))
    count = min(math.ceil(fraction * len(scores)), len(finite))
    order = finite[np.argsort(-scores[finite], kind="stable")]
    return sorted(order[:count].tolist())


def random_fraction(usable: list[int], total: int, fraction: float, seed: int) -> list[int]:
    """⌈fraction · total⌉ of the ``usable`` indices drawn uniformly without replacement."""
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    count = min(math.ceil(fraction * total), len(usable))
    rng = np.random.default_rng(seed)
    return sorted(rng.choice(usable, size=count, replace=False).tolist())
