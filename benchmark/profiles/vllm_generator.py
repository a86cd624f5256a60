"""vLLM sampling for the GPU profiles (``paper``, ``gpu``), where vLLM and a CUDA GPU are present.

The papers sample with vLLM; so does this generator, for every sample, including samples
from a fine-tuned policy. Two copies of the weights exist: the engine's (bf16, sampling:
:mod:`benchmark.profiles.vllm_engine`, in the coordinator when this generator is in the
method process) and a transformers copy (loaded on first use of
:attr:`VLLMGenerator.model` or ``logprobs``), which SFT/DPO train and which scores. They
stay one model because:

- a policy is sampled through :meth:`VLLMGenerator.adapted`: the peft LoRA adapter the
  method trained on the transformers copy is saved to a temporary directory, and every
  ``generate`` inside the block samples with it (vLLM's multi-LoRA support). The engine is
  built with ``enable_lora`` and a ``max_lora_rank`` (16; the papers use 4);
- the base weights the engine mirrors never change behind its back: every transformers
  parameter's in-place version counter is recorded at load, and ``generate`` refuses
  (:class:`StaleEngineError`) once one moved (a full fine-tune in place, an adapter merged
  and not undone) or the model was replaced, rather than sample the old weights. A full
  fine-tune cannot be sampled here (``adapted`` raises): reloading weights into a running
  engine is not done. Nothing ever falls back to transformers sampling.

The engine holds the GPU only while it samples a batch (:class:`~.vllm_engine.VLLMEngine`),
or a run of batches inside :meth:`VLLMGenerator.sampling_session`, so training and scoring
the transformers copy never meet it awake (reaching the copy through this generator inside
a session puts the engine to sleep first; the coordinator also rests its engines before any
pool call and before it takes a method's answer).

Tested on the CPU with a fake ``vllm`` that records its calls (``tests/fakes/``); on a GPU
by the device kit.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from benchmark.profiles.base import Generator, SamplingParams
from benchmark.profiles.hf_generator import HFGenerator, encode_prompts, is_peft_model
from benchmark.profiles.vllm_engine import SamplingEngine


class StaleEngineError(RuntimeError):
    """The transformers weights changed in place, so vLLM's copy no longer matches them."""


class VLLMGenerator(Generator):
    """Samples with a vLLM engine; trains and scores a transformers copy (module docstring)."""

    def __init__(
        self,
        engine: SamplingEngine,
        name: str,
        tokenizer: Any,
        load_transformers: Callable[[], HFGenerator],
        max_positions: int,
    ) -> None:
        self.engine = engine
        self.name = name
        self.tokenizer = tokenizer
        self._load_transformers = load_transformers
        self._positions = max_positions
        self._hf: HFGenerator | None = None
        self._mirrored: Any = None  # the transformers model whose weights the engine holds
        self._versions: list[tuple[Any, int]] = []
        self._adapter: Path | None = None  # the adapted block's adapter directory, if any
        self._sessions = 0  # open sampling sessions: the engine stays awake between batches
        self._awake = False  # the engine was left awake after a batch

    @property
    def max_positions(self) -> int:
        return self._positions

    def transformers(self) -> HFGenerator:
        """The transformers copy as a generator (span filling on its model)."""
        self._rest_engine()  # the copy is about to train or score: the GPU is its
        if self._hf is None:
            self._hf = self._load_transformers()
            self._mirrored = self._hf.model
            self._versions = [(p, p._version) for p in self._mirrored.parameters()]
        return self._hf

    @property
    def model(self) -> Any:
        """The transformers copy, for training and scoring."""
        return self.transformers().model

    @model.setter
    def model(self, value: Any) -> None:
        self.transformers().model = value

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
        vLLM's LoRA support."""
        if not is_peft_model(model):
            raise StaleEngineError(
                f"{self.name}: vLLM samples a fine-tuned policy only as a LoRA adapter; a "
                "full fine-tune would need its weights reloaded into the engine"
            )
        if model.get_base_model() is not self.model:
            raise ValueError(f"the adapter is not on {self.name}'s model")
        name = model.active_adapter
        with tempfile.TemporaryDirectory(prefix="fedsynth-lora-") as tmp:
            model.save_pretrained(tmp, selected_adapters=[name])
            self._adapter = Path(tmp if name == "default" else os.path.join(tmp, name))
            try:
                yield
            finally:
                self._adapter = None

    @contextlib.contextmanager
    def sampling_session(self) -> Iterator[None]:
        self._sessions += 1
        try:
            yield
        finally:
            self._sessions -= 1
            if not self._sessions:
                self._rest_engine()

    def _rest_engine(self) -> None:
        if self._awake:
            self._awake = False
            self.engine.rest()

    def generate(self, prompts: list[str], params: SamplingParams, chat: bool = True) -> list[str]:
        if not prompts:
            return []
        self._check_weights()
        room = self._positions - params.max_new_tokens  # prompts cut from the left, as HF's
        if room < 1:
            raise ValueError(
                f"max_new_tokens={params.max_new_tokens} leaves no room for a prompt in "
                f"{self.name}'s context of {self._positions} tokens"
            )
        ids = [ids[-room:] for ids in encode_prompts(self.tokenizer, prompts, chat)]
        self._awake = self._sessions > 0
        return self.engine.sample(ids, params, self._adapter, stay_awake=self._awake)

    def logprobs(self, prompts: list[str], completions: list[str], chat: bool = True) -> np.ndarray:
        return self.transformers().logprobs(prompts, completions, chat)
