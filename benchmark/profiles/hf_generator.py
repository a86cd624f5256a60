"""A :class:`Generator` over any HF causal LM (tiny GPT-2, SmolLM2, the paper's LLaMA).

Choices (the papers do not fix them):
- ``temperature == 0`` means greedy decoding; otherwise pure temperature + nucleus sampling
  (``top_k`` is disabled explicitly, so transformers' default ``top_k=50`` never applies).
- A batch is reproducible given ``SamplingParams.seed`` and the same prompt list (torch's RNG
  is forked and seeded, so the caller's global RNG state is untouched).
- Prompts are sorted by length and batched with left padding (decoder-only), then put
  back in the caller's order; prompts that do not fit in the context are cut from the left.
- An empty prompt becomes the BOS token so unconditional sampling works.
- ``logprobs`` tokenises prompt and completion separately and concatenates them, so the
  scored tokens are exactly the completion's own tokens; no end-of-turn token is added.
- ``fast_sampling``: sampling (never scoring or training; ``generate`` and the span filler,
  through :meth:`HFGenerator.sampling_context`) runs under bf16 autocast when
  the CPU has native bf16 matrix kernels (AVX512-BF16 / AMX; oneDNN says so). Measured on
  the 2-core AMD EPYC of this project (``benchmarks/bench_generation.py``, 3-shot prompts,
  batch 32): fp32 1.50 texts/s, bf16 autocast 3.03 texts/s; fp32 matmul 201 GFLOP/s vs
  bf16 827 GFLOP/s. Autocast keeps the fp32 weights untouched (LoRA / DPO train on them)
  and casts per matmul. On a CPU without native bf16 it would be slower, so it stays fp32
  there; the profile records which path ran (:func:`sampling_precision`).
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any

import numpy as np
import torch

from benchmark.profiles.base import Generator, SamplingParams
from benchmark.profiles.seeding import seeded
from benchmark.progress import progress


def context_length(model: Any) -> int:
    """Maximum number of positions the model accepts."""
    config = model.config
    for attr in ("n_positions", "max_position_embeddings"):
        value = getattr(config, attr, None)
        if value:
            return int(value)
    raise ValueError(f"cannot tell the context length of {type(model).__name__}")


def start_id(tokenizer: Any) -> int:
    """BOS if the tokenizer has one, else EOS (GPT-2 uses ``<|endoftext|>`` for both)."""
    return tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id


def encode_prompts(tokenizer: Any, prompts: list[str], chat: bool) -> list[list[int]]:
    """Token ids of each prompt, through the chat template when ``chat`` and one exists."""
    if not prompts:
        return []
    if chat and tokenizer.chat_template:
        texts = [
            tokenizer.apply_chat_template(
                [{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False
            )
            for p in prompts
        ]
        ids = tokenizer(texts, add_special_tokens=False)["input_ids"]
    else:
        ids = tokenizer(list(prompts))["input_ids"]
    return [list(x) if len(x) else [start_id(tokenizer)] for x in ids]


@functools.cache
def native_bf16() -> bool:
    """Whether this CPU has native bf16 matrix kernels (oneDNN's check)."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def sampling_precision(fast_sampling: bool, device: str = "cpu") -> str:
    """The precision sampling runs at: ``bf16-autocast`` or ``fp32``."""
    return "bf16-autocast" if fast_sampling and device == "cpu" and native_bf16() else "fp32"


class HFGenerator(Generator):
    """Batched sampling and scoring with a transformers causal LM."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        name: str,
        batch_size: int = 16,
        device: str = "cpu",
        fast_sampling: bool = False,
    ) -> None:
        self.model = model.to(device)
        self.tokenizer = tokenizer
        self.name = name
        self.batch_size = batch_size
        self.device = device
        self.precision = sampling_precision(fast_sampling, device)
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token

    def sampling_context(self) -> contextlib.AbstractContextManager:
        """bf16 autocast when :attr:`precision` says so, else nothing: for every sampling
        loop over this model (``generate`` and the span filler), never scoring or training."""
        if self.precision == "bf16-autocast":
            return torch.autocast("cpu", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    @property
    def max_positions(self) -> int:
        return context_length(self.model)

    def encode_prompts(self, prompts: list[str], chat: bool) -> list[list[int]]:
        return encode_prompts(self.tokenizer, prompts, chat)

    def left_pad(self, rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Left-padded ids and attention mask on the model's device."""
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), self.tokenizer.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            ids[i, width - len(row) :] = torch.tensor(row)
            mask[i, width - len(row) :] = 1
        return ids.to(self.device), mask.to(self.device)

    def _generation_config(self, params: SamplingParams) -> Any:
        from transformers import GenerationConfig

        eos = self.model.generation_config.eos_token_id
        sample = params.temperature > 0
        return GenerationConfig(
            max_new_tokens=params.max_new_tokens,
            do_sample=sample,
            temperature=params.temperature if sample else 1.0,
            top_p=params.top_p if sample else 1.0,
            top_k=0 if sample else None,
            num_beams=1,
            repetition_penalty=1.0,
            eos_token_id=eos if eos is not None else self.tokenizer.eos_token_id,
            pad_token_id=self.tokenizer.pad_token_id,
        )

    def generate(self, prompts: list[str], params: SamplingParams, chat: bool = True) -> list[str]:
        if not prompts:
            return []
        room = self.max_positions - params.max_new_tokens
        if room < 1:
            raise ValueError(
                f"max_new_tokens={params.max_new_tokens} leaves no room for a prompt in "
                f"{self.name}'s context of {self.max_positions} tokens"
            )
        rows = [r[-room:] for r in self.encode_prompts(prompts, chat)]
        order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
        config = self._generation_config(params)
        out: list[str] = [""] * len(rows)
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad(), seeded(params.seed), self.sampling_context():
                starts = range(0, len(order), self.batch_size)
                for start in progress(starts, f"generate {len(rows)}", unit="batch"):
                    chunk = order[start : start + self.batch_size]
                    ids, mask = self.left_pad([rows[i] for i in chunk])
                    seqs = self.model.generate(
                        input_ids=ids, attention_mask=mask, generation_config=config
                    )
                    texts = self.tokenizer.batch_decode(
                        seqs[:, ids.shape[1] :], skip_special_tokens=True
                    )
                    for i, text in zip(chunk, texts, strict=True):
                        out[i] = text
        finally:
            self.model.train(was_training)
        return out

    def logprobs(self, prompts: list[str], completions: list[str], chat: bool = True) -> np.ndarray:
        if len(prompts) != len(completions):
            raise ValueError("logprobs needs one completion per prompt")
        if not prompts:
            return np.zeros(0, dtype=np.float64)
        prompt_ids = self.encode_prompts(prompts, chat)
        completion_ids = self.tokenizer(list(completions), add_special_tokens=False)["input_ids"]
        rows: list[tuple[list[int], int]] = []
        for p, c in zip(prompt_ids, completion_ids, strict=True):
            room = self.max_positions - len(c)
            if room < 1:
                raise ValueError(
                    f"a completion of {len(c)} tokens does not fit {self.name}'s context "
                    f"of {self.max_positions} tokens"
                )
            p = p[-room:]
            rows.append((p + list(c), len(p)))
        result = np.zeros(len(rows), dtype=np.float64)
        # length-sorted batches: little padding, and few positions whose logits are kept
        order = sorted(range(len(rows)), key=lambda i: len(rows[i][0]))
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                for start in range(0, len(order), self.batch_size):
                    chunk = order[start : start + self.batch_size]
                    result[chunk] = self._score([rows[i] for i in chunk])
        finally:
            self.model.train(was_training)
        return result

    def _score(self, rows: list[tuple[list[int], int]]) -> np.ndarray:
        """Completion log-prob sums for right-padded rows of (ids, prompt length)."""
        width = max(len(ids) for ids, _ in rows)
        ids = torch.full((len(rows), width), self.tokenizer.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, (row, _) in enumerate(rows):
            ids[i, : len(row)] = torch.tensor(row)
            mask[i, : len(row)] = 1
        # only the positions that predict a completion token get logits: a full batch of
        # vocabulary-wide logits over every prompt position is gigabytes for a judge prompt
        first = min(n_prompt for _, n_prompt in rows) - 1
        logits = self.model(
            input_ids=ids.to(self.device),
            attention_mask=mask.to(self.device),
            logits_to_keep=width - first,
        ).logits
        sums = np.zeros(len(rows), dtype=np.float64)
        for i, (row, n_prompt) in enumerate(rows):
            if len(row) == n_prompt:
                continue
            step = logits[i, n_prompt - 1 - first : len(row) - 1 - first].float().log_softmax(-1)
            target = torch.tensor(row[n_prompt:], device=step.device).unsqueeze(-1)
            sums[i] = step.gather(-1, target).sum().item()
        return sums
