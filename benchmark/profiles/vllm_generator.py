"""vLLM sampling for the GPU profiles (``paper``, ``gpu``), where vLLM and a CUDA GPU are present.

The papers sample with vLLM; so does this generator, for every sample, including samples
from a fine-tuned policy. Two copies of the weights exist: the engine's (bf16, sampling) and
a transformers copy (loaded on first use of :attr:`VLLMGenerator.model` or ``logprobs``),
which SFT/DPO train and which scores. They stay one model because:

- a policy is sampled through :meth:`VLLMGenerator.adapted`: the peft LoRA adapter the
  method trained on the transformers copy is saved to a temporary directory and every
  ``generate`` inside the block passes it to the engine as a ``LoRARequest`` (vLLM's
  multi-LoRA support; a fresh adapter id each time, as vLLM caches adapters by id). The
  engine is built with ``enable_lora`` and a ``max_lora_rank`` (16; the papers use 4);
- the base weights the engine mirrors never change behind its back: every transformers
  parameter's in-place version counter is recorded at load, and ``generate`` refuses
  (:class:`StaleEngineError`) once one moved (a full fine-tune in place, an adapter merged
  and not undone) or the model was replaced, rather than sample the old weights. A full
  fine-tune cannot be sampled here (``adapted`` raises): reloading weights into a running
  engine is not done. Nothing ever falls back to transformers sampling.

GPU memory between phases: the engine is built with ``enable_sleep_mode``. It goes to sleep
(level 1: weights to CPU RAM, KV cache freed) when the transformers copy is handed out for
training (any access to ``model``) and when an ``adapted`` block ends, and wakes for the
next ``generate`` (after ``torch.cuda.empty_cache()``, so the memory training freed is
really free). Scoring (``logprobs``) uses the transformers copy and leaves the engine as it
is. Each prompt gets its own vLLM seed drawn from ``SamplingParams.seed``, so repeated
prompts yield different samples but a batch is reproducible.

Tested on the CPU with a fake ``vllm`` that records its calls (``tests/fakes/``); on a GPU
by the device kit.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from benchmark.profiles.base import Generator, SamplingParams
from benchmark.profiles.hf_generator import HFGenerator, encode_prompts, is_peft_model

MAX_LORA_RANK = 16  # vLLM's default; the papers' adapters have rank 4 (POPri, PE+SFT)


class StaleEngineError(RuntimeError):
    """The transformers weights changed in place, so vLLM's copy no longer matches them."""


def vllm_engine(
    model: str,
    *,
    revision: str | None,
    gpu_memory_utilization: float,
    max_model_len: int,
    max_lora_rank: int = MAX_LORA_RANK,
) -> Any:
    """A vLLM engine as the GPU profiles build it: bf16, LoRA and sleep mode enabled."""
    from vllm import LLM

    return LLM(
        model=model,
        revision=revision,
        dtype="bfloat16",
        gpu_memory_utilization=gpu_memory_utilization,
        max_model_len=max_model_len,
        enable_lora=True,
        max_lora_rank=max_lora_rank,
        enable_sleep_mode=True,
    )


class VLLMGenerator(Generator):
    """Samples with a vLLM engine; trains and scores a transformers copy (module docstring)."""

    def __init__(
        self,
        llm: Any,
        name: str,
        load_transformers: Callable[[], HFGenerator],
        max_positions: int,
    ) -> None:
        self.llm = llm
        self.name = name
        self.tokenizer = llm.get_tokenizer()
        self._load_transformers = load_transformers
        self._positions = max_positions
        self._hf: HFGenerator | None = None
        self._mirrored: Any = None  # the transformers model whose weights the engine holds
        self._versions: list[tuple[Any, int]] = []
        self._asleep = False
        self._lora: Any = None  # the LoRARequest of the adapted block, if inside one
        self._lora_ids = itertools.count(1)

    @property
    def max_positions(self) -> int:
        return self._positions

    def _transformers(self) -> HFGenerator:
        if self._hf is None:
            self._hf = self._load_transformers()
            self._mirrored = self._hf.model
            self._versions = [(p, p._version) for p in self._mirrored.parameters()]
        return self._hf

    def transformers(self) -> HFGenerator:
        """The transformers copy as a generator (span filling on its model); the engine
        sleeps now and wakes for the next ``generate``."""
        self.sleep()
        return self._transformers()

    @property
    def model(self) -> Any:
        """The transformers copy, for training and scoring; the engine goes to sleep."""
        self.sleep()
        return self._transformers().model

    @model.setter
    def model(self, value: Any) -> None:
        self.sleep()
        self._transformers().model = value

    def sleep(self) -> None:
        """Release the engine's GPU memory (weights to CPU RAM, KV cache dropped)."""
        if not self._asleep:
            self.llm.sleep(level=1)
            self._asleep = True

    def _wake(self) -> None:
        if self._asleep:
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()  # what training freed goes back to the engine
            self.llm.wake_up()
            self._asleep = False

    def _check_weights(self) -> None:
        """Refuse to sample while the engine's weights differ from the transformers copy."""
        if self._hf is None:
            return
        if self._hf.model is not self._mirrored:
            raise StaleEngineError(
                f"{self.name}: the transformers model was replaced; vLLM would sample the "
                "weights it loaded. Sample a fine-tuned policy through generator.adapted()"
            )
        if any(p._version != v for p, v in self._versions):
            raise StaleEngineError(
                f"{self.name}: the transformers weights were changed in place; vLLM would "
                "sample the weights it loaded. Train a LoRA adapter and sample it through "
                "generator.adapted()"
            )

    @contextlib.contextmanager
    def adapted(self, model: Any) -> Iterator[None]:
        """Sample from the LoRA adapter injected into :attr:`model` (a peft model) through
        vLLM's LoRA support; the engine sleeps again when the block ends."""
        if not is_peft_model(model):
            raise StaleEngineError(
                f"{self.name}: vLLM samples a fine-tuned policy only as a LoRA adapter; a "
                "full fine-tune would need its weights reloaded into the engine"
            )
        if model.get_base_model() is not self._transformers().model:
            raise ValueError(f"the adapter is not on {self.name}'s model")
        from vllm.lora.request import LoRARequest

        name = model.active_adapter
        with tempfile.TemporaryDirectory(prefix="fedsynth-lora-") as tmp:
            model.save_pretrained(tmp, selected_adapters=[name])
            path = tmp if name == "default" else os.path.join(tmp, name)
            lora_id = next(self._lora_ids)
            self._lora = LoRARequest(f"{self.name}#{lora_id}", lora_id, os.path.abspath(path))
            try:
                yield
            finally:
                self._lora = None
                self.sleep()

    def generate(self, prompts: list[str], params: SamplingParams, chat: bool = True) -> list[str]:
        if not prompts:
            return []
        self._check_weights()
        self._wake()
        from vllm import SamplingParams as VLLMParams

        room = self._positions - params.max_new_tokens  # prompts cut from the left, as HF's
        if room < 1:
            raise ValueError(
                f"max_new_tokens={params.max_new_tokens} leaves no room for a prompt in "
                f"{self.name}'s context of {self._positions} tokens"
            )
        requests = [
            {"prompt_token_ids": ids[-room:]}
            for ids in encode_prompts(self.tokenizer, prompts, chat)
        ]
        seeds = np.random.SeedSequence(params.seed).generate_state(len(prompts))
        greedy = params.temperature <= 0
        sampling = [
            VLLMParams(
                n=1,
                temperature=0.0 if greedy else params.temperature,
                top_p=1.0 if greedy else params.top_p,
                max_tokens=params.max_new_tokens,
                seed=int(s),
            )
            for s in seeds
        ]
        outputs = self.llm.generate(requests, sampling, use_tqdm=False, lora_request=self._lora)
        return [o.outputs[0].text for o in outputs]

    def logprobs(self, prompts: list[str], completions: list[str], chat: bool = True) -> np.ndarray:
        return self._transformers().logprobs(prompts, completions, chat)
