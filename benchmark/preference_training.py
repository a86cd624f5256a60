"""Training a generator on preferences: SFT on completions, then DPO (paper 003's
downstream alignment), and the per-pair log-probabilities both need.

Why here, in the harness: the evaluator aligns the downstream policy on every released
preference set the same way (``alignment``), and methods reuse the same pieces (PE+SFT's
fine-tuning; DP-FT trains the same losses under DP-SGD).

DPO (Rafailov et al. 2023), sigmoid loss: −log σ(β[(log π(a⁺|x) − log π_ref(a⁺|x)) −
(log π(a⁻|x) − log π_ref(a⁻|x))]), log π the summed log-probability of the response
tokens. The reference is the SFT model, frozen (its log-probabilities are computed once,
before DPO, so no second model is kept). Paper 003 uses the eric-mitchell DPO code
(RMSprop by default); here AdamW, without warm-up: the paper states neither.

Precision (:mod:`benchmark.training_precision`): a model loaded in bf16 (the ``paper``
profile's policy on a GPU) is trained on a float32 copy (:func:`trainable_copy`: float32
master weights), its forward pass under bf16 autocast on a GPU; updated in place in bf16,
most of an update at the papers' learning rates rounds to zero. Micro-batches
(``micro_batch_size``, gradients accumulated to the batch's) and gradient checkpointing fit
a paper batch in GPU memory without changing the loss.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from benchmark.profiles.hf_generator import context_length
from benchmark.profiles.seeding import seeded
from benchmark.training_precision import checkpointed, training_autocast


@dataclass(frozen=True)
class SFTConfig:
    epochs: int
    lr: float
    batch_size: int
    lora_r: int  # 0: full fine-tune
    lora_alpha: int
    max_completion_tokens: int
    max_grad_norm: float = 1.0
    micro_batch_size: int = 0  # > 0: a batch's gradient accumulated over parts this large
    gradient_checkpointing: bool = False  # recompute activations in the backward pass


@dataclass(frozen=True)
class AlignmentConfig:
    """SFT on the chosen responses, then DPO on the pairs (paper 003 §5: SFT lr 5e-7 for
    1 epoch, DPO β 0.1, lr 1e-6 for 3 epochs, batch 64 for Pythia-2.8B). The last two
    fields say how a batch is computed, not what it computes: the profile's
    :meth:`~benchmark.profiles.base.ModelProfile.training_memory` fills them where a spec
    does not."""

    sft_epochs: int = 1
    sft_lr: float = 5e-7
    dpo_epochs: int = 3
    dpo_lr: float = 1e-6
    beta: float = 0.1
    batch_size: int = 64
    max_completion_tokens: int = 128
    max_grad_norm: float = 1.0
    micro_batch_size: int = 0
    gradient_checkpointing: bool = False

    def sft(self) -> SFTConfig:
        return SFTConfig(
            self.sft_epochs,
            self.sft_lr,
            self.batch_size,
            0,
            0,
            self.max_completion_tokens,
            self.max_grad_norm,
            self.micro_batch_size,
            self.gradient_checkpointing,
        )


def encode_completions(
    tokenizer: Any, pairs: list[tuple[str, str]], max_completion: int, context: int
) -> list[tuple[list[int], int]]:
    """(prompt + completion + EOS token ids, prompt length) per pair; a prompt too long for
    the ``context`` is cut from the left, as the generator does when sampling."""
    eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    out = []
    for prompt, completion in pairs:
        c = tokenizer(completion, add_special_tokens=False)["input_ids"][:max_completion]
        room = context - len(c) - len(eos)
        if room < 1:
            raise ValueError(
                f"max_completion_tokens={max_completion} leaves no room for a "
                f"prompt in a context of {context} tokens"
            )
        p = tokenizer(prompt, add_special_tokens=False)["input_ids"][-room:]
        out.append((list(p) + list(c) + eos, len(p)))
    return out


def padded(
    rows: list[tuple[list[int], int]], device: Any
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded ids, attention mask and labels (−100 outside the completions)."""
    width = max(len(ids) for ids, _ in rows)
    ids = torch.zeros((len(rows), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    labels = torch.full_like(ids, -100)
    for r, (seq, prompt_len) in enumerate(rows):
        ids[r, : len(seq)] = torch.tensor(seq)
        mask[r, : len(seq)] = 1
        labels[r, prompt_len : len(seq)] = ids[r, prompt_len : len(seq)]
    return ids.to(device), mask.to(device), labels.to(device)


def completion_logprobs(model: Any, rows: list[tuple[list[int], int]]) -> torch.Tensor:
    """Σ log π(completion tokens | prompt) per row (differentiable).

    Logits are computed only from the position before the batch's first completion token
    on (``logits_to_keep``): the vocabulary projection of the prompt positions was a
    quarter of a SmolLM2 forward pass here, for nothing."""
    ids, mask, labels = padded(rows, next(model.parameters()).device)
    keep = ids.shape[1] - max(min(prompt_len for _, prompt_len in rows) - 1, 0)
    logits = model(input_ids=ids, attention_mask=mask, logits_to_keep=keep).logits
    logits = logits[:, :-1].float()
    targets = labels[:, ids.shape[1] - keep + 1 :]
    logp = logits.log_softmax(-1).gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return (logp * (targets != -100)).sum(-1)


def _batches(count: int, batch_size: int, epochs: int, seed: int) -> list[list[int]]:
    order_rng = torch.Generator().manual_seed(seed)
    return [
        batch.tolist()
        for _ in range(epochs)
        for batch in torch.randperm(count, generator=order_rng).split(batch_size)
    ]


def _train(
    model: Any,
    batches: list[list[int]],
    lr: float,
    max_grad_norm: float,
    loss_of: Callable[[list[int], list[int]], torch.Tensor],
    micro_batch_size: int = 0,
    gradient_checkpointing: bool = False,
    lengths: Sequence[int] = (),
) -> None:
    """AdamW with a cosine schedule over ``batches``. ``loss_of(part, batch)`` is part's
    share of the batch's loss: the shares of a batch's parts (of ``micro_batch_size``, or
    the whole batch) sum to its loss, so their accumulated gradients are its gradient. With
    ``lengths`` (per example, in tokens) a batch is cut into parts in order of length, so a
    part pads to its own longest example, not the batch's: the same gradient, less padding."""
    params = [p for p in model.parameters() if p.requires_grad]
    optimiser = torch.optim.AdamW(params, lr=lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimiser, T_max=max(len(batches), 1))
    model.train()
    try:
        with checkpointed(model, gradient_checkpointing):
            for batch in batches:
                optimiser.zero_grad(set_to_none=True)
                step = micro_batch_size if micro_batch_size > 0 else len(batch)
                order = sorted(batch, key=lengths.__getitem__) if lengths else batch
                for start in range(0, len(order), step):
                    with training_autocast(model):
                        loss = loss_of(order[start : start + step], batch)
                    loss.backward()
                torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
                optimiser.step()
                schedule.step()
    finally:
        model.eval()


def scored_tokens(rows: list[tuple[list[int], int]]) -> int:
    """How many tokens the next-token loss of ``rows`` scores (the completion's, less a
    first position no token predicts)."""
    return sum(len(seq) - max(prompt_len, 1) for seq, prompt_len in rows)


def train_completions(
    model: Any, tokenizer: Any, pairs: list[tuple[str, str]], config: SFTConfig, seed: int
) -> None:
    """SFT: next-token loss on the completion tokens of (prompt, completion) pairs, the mean
    over a batch's tokens (a micro-batch's mean weighted by its share of them)."""
    seqs = encode_completions(tokenizer, pairs, config.max_completion_tokens, context_length(model))
    device = next(model.parameters()).device

    def loss_of(part: list[int], batch: list[int]) -> torch.Tensor:
        rows = [seqs[i] for i in part]
        ids, mask, labels = padded(rows, device)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        if len(part) == len(batch):
            return loss
        return loss * (scored_tokens(rows) / scored_tokens([seqs[i] for i in batch]))

    batches = _batches(len(seqs), config.batch_size, config.epochs, seed)
    _train(
        model, batches, config.lr, config.max_grad_norm, loss_of,
        config.micro_batch_size, config.gradient_checkpointing, [len(ids) for ids, _ in seqs],
    )  # fmt: skip


def encode_pairs(
    tokenizer: Any, pairs: list[dict[str, str]], max_completion: int, context: int
) -> tuple[list[tuple[list[int], int]], list[tuple[list[int], int]]]:
    """The chosen and the rejected sequences of preference pairs."""
    chosen = encode_completions(
        tokenizer, [(p["prompt"], p["chosen"]) for p in pairs], max_completion, context
    )
    rejected = encode_completions(
        tokenizer, [(p["prompt"], p["rejected"]) for p in pairs], max_completion, context
    )
    return chosen, rejected


def dpo_margins(
    model: Any,
    chosen: list[tuple[list[int], int]],
    rejected: list[tuple[list[int], int]],
    reference: torch.Tensor,
) -> torch.Tensor:
    """(log π(a⁺) − log π(a⁻)) − reference, per pair; ``reference`` is the same difference
    under the reference model."""
    return completion_logprobs(model, chosen) - completion_logprobs(model, rejected) - reference


def pair_lengths(
    chosen: list[tuple[list[int], int]], rejected: list[tuple[list[int], int]]
) -> list[int]:
    """Each pair's longer sequence, in tokens: what a batch of pairs pads to."""
    return [max(len(c), len(r)) for (c, _), (r, _) in zip(chosen, rejected, strict=True)]


@torch.no_grad()
def reference_margins(
    model: Any,
    chosen: list[tuple[list[int], int]],
    rejected: list[tuple[list[int], int]],
    batch_size: int,
) -> torch.Tensor:
    """log π_ref(a⁺) − log π_ref(a⁻) per pair, batched, without gradients, at the precision
    training computes the policy's (``training_autocast``), so they start equal.

    Pairs are batched in order of length (and returned in their own order): right padding
    to a batch's longest sequence was 60 % on top of the chitchat tuples' tokens."""
    order = sorted(range(len(chosen)), key=pair_lengths(chosen, rejected).__getitem__)
    out = torch.zeros(len(chosen))
    for start in range(0, len(order), batch_size):
        part = order[start : start + batch_size]
        zero = torch.zeros(len(part), device=next(model.parameters()).device)
        with training_autocast(model):
            margins = dpo_margins(
                model, [chosen[i] for i in part], [rejected[i] for i in part], zero
            )
        out[part] = margins.float().cpu()
    return out


def train_dpo(
    model: Any, tokenizer: Any, pairs: list[dict[str, str]], config: AlignmentConfig, seed: int
) -> None:
    """DPO of ``model`` in place, referenced to ``model`` as it is now."""
    chosen, rejected = encode_pairs(
        tokenizer, pairs, config.max_completion_tokens, context_length(model)
    )
    model.eval()
    step = config.micro_batch_size or config.batch_size
    reference = reference_margins(model, chosen, rejected, step)
    device = next(model.parameters()).device

    def loss_of(part: list[int], batch: list[int]) -> torch.Tensor:
        margins = dpo_margins(
            model,
            [chosen[i] for i in part],
            [rejected[i] for i in part],
            reference[part].to(device),
        )
        losses = -torch.nn.functional.logsigmoid(config.beta * margins)
        return losses.mean() if len(part) == len(batch) else losses.sum() / len(batch)

    batches = _batches(len(pairs), config.batch_size, config.dpo_epochs, seed)
    _train(
        model, batches, config.dpo_lr, config.max_grad_norm, loss_of,
        config.micro_batch_size, config.gradient_checkpointing, pair_lengths(chosen, rejected),
    )  # fmt: skip


def trainable_copy(model: Any) -> Any:
    """A float32 copy of ``model`` (the master weights an update at the papers' learning
    rates needs: bf16 would round most of it away) with every parameter trainable and the
    class's own ``forward``.

    The profile's generator is shared (cached per process), and code that trained it before
    may have left it changed: peft freezes its parameters, and trl's trainer replaces the
    instance's ``forward`` with a closure over the original's bound ``forward``, which a deep
    copy keeps, so the copy would compute with the original's weights and train nothing."""
    copied = copy.deepcopy(model).float()
    for name in ("forward", "_original_forward"):
        vars(copied).pop(name, None)
    for param in copied.parameters():
        param.requires_grad_(True)
    return copied


def align(
    base: Any, tokenizer: Any, pairs: list[dict[str, str]], config: AlignmentConfig, seed: int
) -> Any:
    """A copy of ``base`` SFT-ed on the chosen responses, then DPO-trained on the pairs
    (the untouched copy when there are no pairs: the ε = 0 base model)."""
    model = trainable_copy(base)
    if pairs:
        with seeded(seed):
            train_completions(
                model, tokenizer, [(p["prompt"], p["chosen"]) for p in pairs], config.sft(), seed
            )
            train_dpo(model, tokenizer, pairs, config, seed)
    model.eval()
    return model
