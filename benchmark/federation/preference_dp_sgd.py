"""DP-FT's harness side (paper 003's private baseline): DP-SGD SFT or DP-SGD DPO of the
downstream policy on private preference tuples.

The pool (:meth:`benchmark.federation.pool.ClientPool.dp_preference_finetune`) runs this
in its trusted process on one part of the tuples: the method sends weights and numbers,
never code. Each privacy unit is one tuple (x, a⁺, a⁻); its example is

- ``sft``: the chosen response as a completion of the prompt, loss −log π(a⁺|x) averaged
  over the response tokens;
- ``dpo``: the pair, loss −log σ(β[(log π(a⁺|x) − log π(a⁻|x)) − (log π_ref(a⁺|x) −
  log π_ref(a⁻|x))]), with π_ref the policy as it arrives (the SFT model), whose margins
  are computed once, before training.

Per-example (per-pair for DPO: both responses in one forward pass) gradients are clipped
one example at a time by :func:`benchmark.federation.local_dp_sgd.train_locally`, so the
pair is the unit whose influence is bounded, exactly, for any architecture.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from benchmark.federation.local_dp_sgd import DPSGDSteps, lm_loss, train_locally
from benchmark.preference_training import (
    completion_logprobs,
    encode_completions,
    encode_pairs,
    reference_margins,
)
from benchmark.profiles.hf_generator import context_length

STAGES = ("sft", "dpo")
IGNORE = -100


def sft_examples(
    tokenizer: Any, records: list[dict[str, Any]], max_completion: int, context: int
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(ids, labels scoring only the chosen response) per tuple."""
    rows = encode_completions(
        tokenizer, [(str(r["prompt"]), str(r["chosen"])) for r in records], max_completion, context
    )
    out = []
    for ids, prompt_len in rows:
        labels = [IGNORE] * prompt_len + ids[prompt_len:]
        out.append((torch.tensor(ids), torch.tensor(labels)))
    return out


def dpo_examples(
    model: Any, tokenizer: Any, records: list[dict[str, Any]], max_completion: int, context: int
) -> list[tuple[Any, Any, torch.Tensor]]:
    """(chosen row, rejected row, reference margin) per tuple; the reference is ``model``."""
    pairs = [{k: str(r[k]) for k in ("prompt", "chosen", "rejected")} for r in records]
    chosen, rejected = encode_pairs(tokenizer, pairs, max_completion, context)
    model.eval()
    reference = reference_margins(model, chosen, rejected, batch_size=8)
    return list(zip(chosen, rejected, reference, strict=True))


def dpo_pair_loss(beta: float) -> Any:
    """The DPO loss of one pair: both responses in one (padded) forward pass."""

    def loss(model: torch.nn.Module, example: tuple[Any, Any, torch.Tensor]) -> torch.Tensor:
        chosen, rejected, reference = example
        logp = completion_logprobs(model, [chosen, rejected])
        margin = logp[0] - logp[1] - reference.to(logp.device)
        return -torch.nn.functional.logsigmoid(beta * margin)

    return loss


def finetune_on_preferences(
    model: torch.nn.Module,
    tokenizer: Any,
    records: list[dict[str, Any]],
    *,
    stage: str,
    beta: float,
    max_completion_tokens: int,
    steps: DPSGDSteps,
    rng: np.random.Generator,
) -> None:
    """One DP-FT stage of ``model`` in place (DP-Adam on the per-example clipped gradients)."""
    context = context_length(model)
    if stage == "sft":
        examples: list[Any] = sft_examples(tokenizer, records, max_completion_tokens, context)
        loss = lm_loss
    else:
        examples = dpo_examples(model, tokenizer, records, max_completion_tokens, context)
        loss = dpo_pair_loss(beta)
    train_locally(model, examples, steps, rng, loss=loss, adam=True)
