"""Texts sampled from a released on-device model, so text metrics (FID, MAUVE, DCR) score it too.

Papers 000/004 compute FID only for synthetic text sets; a leaderboard that ranks model
releases (DP-FedAvg, DP-FTRL, the bounds) beside text releases needs the same numbers for
them, so fedsynth samples texts from the released model. Choices (the papers are silent):
- the on-device LMs are trained without a start token (texts are encoded without special
  tokens), so a sample starts from the first token of a seeded random *public* text (public
  data is free to use), then ``max_length - 1`` tokens are drawn by ancestral sampling at
  ``temperature`` (no top-k/top-p), stopping at the end-of-text token (a split without
  public texts starts from the begin-of-text token);
- sampling is seeded and leaves the caller's RNG untouched; empty samples are dropped.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from benchmark.evaluation.downstream import encode, model_device
from benchmark.profiles.seeding import seeded
from benchmark.progress import progress


def start_tokens(tokenizer: Any, prompts: list[str], n: int, seed: int) -> list[int]:
    """First token ids of ``n`` texts drawn (with replacement) from ``prompts``; the
    begin-of-text token when no prompt has a token."""
    firsts = [ids[0] for ids in encode(tokenizer, prompts, 1) if ids]
    if not firsts:
        return [tokenizer.bos_token_id] * n
    picks = np.random.default_rng([seed, 7]).integers(len(firsts), size=n)
    return [firsts[i] for i in picks]


def ancestral_sample(
    model: Any, input_ids: torch.Tensor, max_new_tokens: int, temperature: float, eos: int
) -> torch.Tensor:
    """Continue each row of ``input_ids`` by ancestral sampling at ``temperature`` (no
    top-k/top-p), stopping at ``eos``; returns the prompt and continuation ids."""
    return model.generate(
        input_ids=input_ids,
        attention_mask=torch.ones_like(input_ids),
        do_sample=True,
        temperature=temperature,
        top_k=0,
        top_p=1.0,
        max_new_tokens=max_new_tokens,
        eos_token_id=eos,
        pad_token_id=eos,
    )


def sample_texts(
    model: Any,
    tokenizer: Any,
    prompts: list[str],
    n: int,
    seed: int,
    max_length: int = 64,
    temperature: float = 1.0,
    batch_size: int = 64,
) -> list[str]:
    """``n`` seeded samples of at most ``max_length`` tokens from the causal LM ``model``."""
    eos = tokenizer.eos_token_id
    device = model_device(model)
    starts = start_tokens(tokenizer, prompts, n, seed)
    texts: list[str] = []
    was_training = model.training
    model.eval()
    with seeded(seed), torch.inference_mode():
        for begin in progress(range(0, n, batch_size), f"sample {n} texts", unit="batch"):
            ids = torch.tensor(starts[begin : begin + batch_size], device=device).unsqueeze(1)
            out = ancestral_sample(model, ids, max_length - 1, temperature, eos)
            texts += tokenizer.batch_decode(out, skip_special_tokens=True)
    model.train(was_training)
    return [t.strip() for t in texts if t.strip()]
