"""PE+SFT (paper 000's baseline): Private Evolution, then supervised fine-tuning of the LLM
on the highest-scoring PE samples, then generation of the synthetic set from it.

Paper 000 §3 (2) describes it in one sentence ("directly fine-tune the LLM Ψ on the
highest scoring samples using next-word-prediction loss"); it is the SFT counterpart of
POPri's DPO step. Steps:

1. ``setup`` + ``round`` × ``iterations``: the PE of paper 004 Algorithms 1–2 (shared
   core :mod:`methods.private_evolution`; one DP histogram release per round), with paper
   000 App. C.3's settings: T = 20, N_syn = 1024, H = 0.1626 (the reference code's
   ``H_multiplier``: 4 × 0.1626 / (1.541 × √2) = 0.2985 noise stds, ``threshold_std``; see
   "Units of H" in :mod:`methods.private_evolution`), all-MiniLM-L6-v2 embeddings, δ = 3e-6;
   the rest "similar to Hou et al. (2024)": paper 004's lookahead 4, W_steps = 2,
   MASK% = 30 %, 8 samples per client. (Paper 000's Table 2 lists 1,800 downloaded
   embeddings for PE, POPri's K; App. C.3's explicit N_syn = 1024 is used.)
2. ``finish`` — select: the ``sft_top_k`` DP seeds (``∪_t Set(S'_t)``) with the highest
   score, the largest noisy histogram value each received.
3. SFT: each selected sample is the completion of a POPri-style prompt (three random
   public texts in the Fig. 3 few-shot structure, :func:`~methods.private_evolution.
   few_shot_prompt`); the loss is next-token cross-entropy on the completion tokens only
   (plus EOS), truncated to ``sft_max_completion_tokens`` (64, the papers' sequence length).
   ``lora_r > 0``: LoRA via peft on all linear layers (paper 000 uses r = 4, α = 8 for its
   LLM fine-tuning); ``lora_r = 0`` (``tiny``): full fine-tune of the tiny generator.
   AdamW with a cosine schedule, gradient-norm clipping at 1.
4. Generate ``generate_size`` samples from the fine-tuned LLM with fresh prompts of three
   random public texts (as POPri generates its final set), ``release_temperature`` and
   ``release_top_p`` 1.0 (:mod:`methods.release_sampling`), at
   most ``generate_max_new_tokens`` tokens each (64 in ``paper``: paper 000 §5 sets the
   maximum sequence length to 64).
   Everything after step 1 is post-processing of the noisy releases.

Choices paper 000 leaves open: the prompt of the SFT examples (above), ``sft_top_k`` (1,800:
as many as POPri's chosen samples per round, so both fine-tune on equally many texts), the
SFT learning rate (1e-4, a usual LoRA SFT rate; POPri's 8e-7 is a DPO rate), epochs (2) and
batch size (24) as paper 000's LLM fine-tuning, and 1,000,000 generated samples (paper 000
App. D's downstream set). The generator is fine-tuned in place and restored afterwards
(LoRA unloaded, or the full-fine-tune weights reloaded), so the profile's cached model is
unchanged after the run. The fine-tuned model is sampled through ``generator.adapted``:
merged into the weights with transformers, a LoRA request with vLLM (which cannot sample
a full fine-tune and says so).

``cpu`` (working scale): the cpu PE of ``pre_text`` (T = 3, N_syn = 256, lookahead 1,
W_steps = 1) with this method's H of 0.2985 noise stds; SFT on the 128 best seeds for 2
epochs at batch 8 (32 optimiser steps; sized for 2 cores:
``docs/measurements/working-scale.md#pe_sft``), LoRA r = 8,
α = 16 and a rate of 5e-4 for so few steps; 1,000 generated samples of at most 64 tokens.
``tiny`` fine-tunes
the whole random tiny generator.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, replace
from typing import Any

import numpy as np

from benchmark.api import (
    Artifact,
    Generator,
    MethodContext,
    SFTConfig,
    float32_in_place,
    seeded,
    train_completions,
)
from methods.lora import lora_config, trainable_flags_kept
from methods.private_evolution import (
    PE_CPU,
    PE_PAPER,
    PE_TINY,
    PrivateEvolution,
    eligible_public,
    expand,
    few_shot_prompt,
)
from methods.release_sampling import RELEASE_SAMPLING, release_sampling


def top_scoring(seeds: dict[str, float], k: int) -> list[str]:
    """The ``k`` seeds with the highest score (ties: earlier seeds first)."""
    texts, scores = list(seeds), list(seeds.values())
    order = sorted(range(len(texts)), key=lambda i: -scores[i])
    return [texts[i] for i in order[:k]]


@contextmanager
def fine_tuned(
    generator: Generator, pairs: list[tuple[str, str]], config: SFTConfig, seed: int
) -> Iterator[Any]:
    """The generator's model SFT-ed on ``pairs`` inside the block (a peft model with the
    trained adapter, or the model itself after a full fine-tune), sampled through
    ``generator.adapted``; restored on exit. LoRA adapters are float32 (peft's default on a
    bf16 base); a full fine-tune trains the model in place in float32 (master weights: in
    bf16 most updates would round to zero) and gives it back in its own dtype and weights."""
    base = generator.model
    with trainable_flags_kept(base), ExitStack() as stack:
        if config.lora_r > 0:
            from peft import get_peft_model

            with seeded(seed):  # the adapters' random initialisation
                model = get_peft_model(base, lora_config(config.lora_r, config.lora_alpha))
            snapshot = None
        else:
            model = base
            snapshot = {k: v.detach().clone() for k, v in base.state_dict().items()}
            stack.enter_context(float32_in_place(base))  # exits after the snapshot's reload
        try:
            with seeded(seed):  # dropout
                train_completions(model, generator.tokenizer, pairs, config, seed)
            yield model
        finally:
            if snapshot is None:
                model.unload()
            else:
                base.load_state_dict(snapshot)


def _public_prompts(pool: list[str], n: int, rng: np.random.Generator) -> list[str]:
    return [
        few_shot_prompt([pool[i] for i in rng.choice(len(pool), 3, replace=len(pool) < 3)])
        for _ in range(n)
    ]


# Paper 000 App. C.3: H = 0.1626 is the reference code's H_multiplier (H = 4 × H_multiplier
# × s × σ against a noise std of 1.541 × √2 × s × σ), in noise stds:
PAPER_000_THRESHOLD_STD = 4 * 0.1626 / (1.541 * math.sqrt(2))

_SFT_PAPER = {
    "sft_top_k": 1800,
    "sft_epochs": 2,
    "sft_lr": 1e-4,
    "sft_batch_size": 24,
    "lora_r": 4,
    "lora_alpha": 8,
    "sft_max_completion_tokens": 64,
}


class PESFT(PrivateEvolution):
    name = "pe_sft"
    artifact_kind = "texts"
    privacy_units = ("user",)
    post_processing = tuple(RELEASE_SAMPLING)  # read in finish only
    configs = {
        "paper": {
            **PE_PAPER,
            "iterations": 20,
            "population_size": 1024,
            "threshold_std": PAPER_000_THRESHOLD_STD,
            **_SFT_PAPER,
            "generate_size": 1_000_000,
            "generate_max_new_tokens": 64,
            "generate_batch_size": 256,
            **RELEASE_SAMPLING,
        },
        "cpu": {
            **PE_CPU,
            **_SFT_PAPER,
            "threshold_std": PAPER_000_THRESHOLD_STD,
            "sft_top_k": 128,
            "sft_batch_size": 8,
            "sft_lr": 5e-4,
            "lora_r": 8,
            "lora_alpha": 16,
            "generate_size": 1000,
            "generate_max_new_tokens": 64,
            "generate_batch_size": 32,
            **RELEASE_SAMPLING,
        },
        "tiny": {
            **PE_TINY,
            **_SFT_PAPER,
            "sft_top_k": 6,
            "sft_batch_size": 4,
            "sft_lr": 1e-3,
            "lora_r": 0,
            "sft_max_completion_tokens": 16,
            "generate_size": 8,
            "generate_max_new_tokens": 16,
            "generate_batch_size": 8,
            **RELEASE_SAMPLING,
        },
    }

    def sft_config(self) -> SFTConfig:
        c = self.config
        return SFTConfig(
            epochs=c["sft_epochs"],
            lr=c["sft_lr"],
            batch_size=c["sft_batch_size"],
            lora_r=c["lora_r"],
            lora_alpha=c["lora_alpha"],
            max_completion_tokens=c["sft_max_completion_tokens"],
        )

    def finish(self, ctx: MethodContext, state: Any) -> Artifact:
        rng = ctx.rng(self.num_rounds())
        selected = top_scoring(state["seeds"], self.config["sft_top_k"])
        pool = eligible_public(ctx, self.pe.min_words)
        pairs = list(zip(_public_prompts(pool, len(selected), rng), selected, strict=True))
        seed = int(rng.integers(2**31 - 1))
        params = release_sampling(self.config, self.config["generate_max_new_tokens"])
        memory = asdict(ctx.profile.training_memory())  # how a batch fits, not what it is
        config = replace(self.sft_config(), **memory)
        generator = ctx.profile.generator()
        with (
            fine_tuned(generator, pairs, config, seed) as model,
            generator.adapted(model),
        ):
            texts = expand(
                generator,
                pool,
                self.config["generate_size"],
                params,
                self.config["generate_batch_size"],
                rng,
            )
        return Artifact(kind=self.artifact_kind, texts=texts)
