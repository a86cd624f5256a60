"""The ``paper`` profile: the papers' hub models, loaded by id (a GPU and a hub cache needed).

- generator: ``meta-llama/Meta-Llama-3-8B`` (POPri's LLaMA-3-8B; PrE-Text used LLaMA-2-7B),
  sampled with vLLM when ``vllm`` is importable and CUDA is available, else transformers
  (recorded as ``generator_backend``, with a warning on a GPU without vLLM); with vLLM,
  fine-tuned policies are sampled as LoRA adapters and the engine sleeps except while it
  samples; in an isolated run the engine is the coordinator's
  (:mod:`benchmark.profiles.vllm_generator`, :mod:`benchmark.profiles.vllm_engine`);
- on-device LM: ``distilbert/distilgpt2`` (POPri, PrE-Text);
- masked filler: ``FacebookAI/roberta-large`` (PrE-Text's mask filler, temperature 1, top-p 1);
- embedder: ``sentence-transformers/all-MiniLM-L6-v2`` (all papers);
- the preference track's own models (paper 003 §5, App. B.3): ψ ``BAAI/bge-large-en-v1.5``,
  candidate writer ``meta-llama/Llama-2-7b-chat-hf`` (its code's id; sampled like the
  generator) and the downstream policy ``EleutherAI/pythia-2.8b`` (the deduplicated-or-not
  and base-or-SFT checkpoint is not named; the plain base model is used).
Canonical org-prefixed ids are used (``roberta-large``/``distilgpt2`` redirect to them on the
hub, but a local cache is keyed by the id actually downloaded). Nothing is downloaded when
``HF_HUB_OFFLINE=1``: a model missing from the local cache raises
:class:`ModelUnavailableError` at once, naming the model and how to get it.
"""

from __future__ import annotations

import importlib.util
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache, cached_property
from typing import Any

from benchmark.profiles.base import EngineSpec, Generator, ModelProfile, TrainingMemory
from benchmark.profiles.embedders import SentenceTransformerEmbedder
from benchmark.profiles.fillers import MLMFiller
from benchmark.profiles.hf_generator import HFGenerator
from benchmark.profiles.hub import from_hub
from benchmark.profiles.hub_fetch import HubModel, fetch, hub_requests
from benchmark.profiles.ondevice import PretrainedLM
from benchmark.profiles.packaged import distribution_version
from benchmark.profiles.vllm_engine import open_engine


@dataclass(frozen=True)
class PaperModels:
    """Hub ids of the paper profile's models and the revision they are loaded at."""

    generator: str = "meta-llama/Meta-Llama-3-8B"
    ondevice_lm: str = "distilbert/distilgpt2"
    conditional_lm: str = "openai-community/gpt2"  # paper 001's Yelp generator
    # Paper 002's public LLM is LaMDA 2B (not public) with a 32K SentencePiece; TinyLlama
    # 1.1B is the open model closest to it: a 32K SentencePiece (Llama-2's), ~2B scale.
    public_llm: str = "TinyLlama/TinyLlama_v1.1"
    masked_filler: str = "FacebookAI/roberta-large"
    embedder: str = "sentence-transformers/all-MiniLM-L6-v2"
    preference_embedder: str = "BAAI/bge-large-en-v1.5"
    preference_generator: str = "meta-llama/Llama-2-7b-chat-hf"
    preference_policy: str = "EleutherAI/pythia-2.8b"
    revision: str = "main"
    vllm_gpu_memory_utilization: float = 0.5  # leaves room for the transformers copy
    vllm_max_lora_rank: int = 16  # POPri's and PE+SFT's adapters have rank 4


def _device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def use_vllm() -> bool:
    """vLLM generation needs the package and a CUDA GPU."""
    import torch

    return importlib.util.find_spec("vllm") is not None and torch.cuda.is_available()


def sampling_backend() -> str:
    """What samples the generators, as records say it (loudly when a GPU lacks vLLM)."""
    import torch

    if use_vllm():
        return "vllm"
    if torch.cuda.is_available():
        return "transformers (vllm is not installed: slower than the papers' sampling)"
    return "transformers"


@cache  # the coordinator asks again on every sampling call (engine_spec)
def context_positions(model_id: str, revision: str) -> int:
    """The model's context length, read from its config (vLLM's ``max_model_len``)."""
    from transformers import AutoConfig

    config = from_hub(AutoConfig.from_pretrained, model_id, revision)
    for attr in ("n_positions", "max_position_embeddings"):
        value = getattr(config, attr, None)
        if value:
            return int(value)
    raise ValueError(f"cannot tell the context length of {model_id}")


class PaperProfile(ModelProfile):
    name = "paper"

    def __init__(self, models: PaperModels | None = None) -> None:
        self.models = models or PaperModels()

    def _hf_generator(self, model_id: str) -> HFGenerator:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        revision = self.models.revision
        device = _device()
        dtype = torch.bfloat16 if device == "cuda" else torch.float32
        tokenizer = from_hub(AutoTokenizer.from_pretrained, model_id, revision)
        model = from_hub(AutoModelForCausalLM.from_pretrained, model_id, revision, dtype=dtype)
        return HFGenerator(model, tokenizer, model_id, batch_size=16, device=device)

    def _engine_models(self) -> dict[str, str]:
        """The roles sampled in bulk (by vLLM where it runs), and their hub ids."""
        m = self.models
        return {"generator": m.generator, "preference_generator": m.preference_generator}

    def engine_spec(self, role: str) -> EngineSpec | None:
        model_id = self._engine_models().get(role)
        if model_id is None or not use_vllm():
            return None
        m = self.models
        return EngineSpec(
            model_id,
            m.revision,
            gpu_memory_utilization=m.vllm_gpu_memory_utilization,
            max_model_len=context_positions(model_id, m.revision),
            max_lora_rank=m.vllm_max_lora_rank,
        )

    def _sampler(self, role: str, transformers: Callable[[], HFGenerator]) -> Generator:
        """``role`` as a generator: vLLM for sampling where it runs (training and scoring
        ``transformers``, its copy), else that copy."""
        model_id = self._engine_models()[role]
        spec = self.engine_spec(role)
        if spec is None:
            backend = sampling_backend()
            if backend != "transformers":
                warnings.warn(f"paper profile: {model_id} sampled by {backend}", stacklevel=2)
            return transformers()
        from transformers import AutoTokenizer

        from benchmark.profiles.vllm_generator import VLLMGenerator

        tokenizer = from_hub(AutoTokenizer.from_pretrained, model_id, self.models.revision)
        engine = open_engine(role, spec)
        return VLLMGenerator(engine, model_id, tokenizer, transformers, spec.max_model_len)

    @cached_property
    def _generator_copy(self) -> HFGenerator:
        """The generator in transformers, loaded once: what its vLLM generator trains and
        scores with, and what a judge scores with."""
        return self._hf_generator(self.models.generator)

    @cached_property
    def _generator(self) -> Generator:
        return self._sampler("generator", lambda: self._generator_copy)

    @cached_property
    def _preference_generator(self) -> Generator:
        model_id = self.models.preference_generator
        return self._sampler("preference_generator", lambda: self._hf_generator(model_id))

    @cached_property
    def _preference_policy(self) -> HFGenerator:
        """Trained (SFT, DPO) and scored, never sampled in bulk: transformers only."""
        return self._hf_generator(self.models.preference_policy)

    def _sentence_embedder(self, model_id: str) -> SentenceTransformerEmbedder:
        from sentence_transformers import SentenceTransformer

        model = from_hub(SentenceTransformer, model_id, self.models.revision, device=_device())
        return SentenceTransformerEmbedder(model, model_id)

    @cached_property
    def _embedder(self) -> SentenceTransformerEmbedder:
        return self._sentence_embedder(self.models.embedder)

    @cached_property
    def _preference_embedder(self) -> SentenceTransformerEmbedder:
        return self._sentence_embedder(self.models.preference_embedder)

    def _causal_lm(self, model_id: str) -> PretrainedLM:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        revision = self.models.revision
        tokenizer = from_hub(AutoTokenizer.from_pretrained, model_id, revision)

        def load() -> Any:
            return from_hub(
                AutoModelForCausalLM.from_pretrained, model_id, revision, dtype=torch.float32
            )

        return PretrainedLM(model_id, tokenizer, load, self.lm_device())

    @cached_property
    def _ondevice(self) -> PretrainedLM:
        return self._causal_lm(self.models.ondevice_lm)

    @cached_property
    def _conditional(self) -> PretrainedLM:
        return self._causal_lm(self.models.conditional_lm)

    @cached_property
    def _public_llm(self) -> PretrainedLM:
        return self._causal_lm(self.models.public_llm)

    @cached_property
    def _filler(self) -> MLMFiller:
        from transformers import AutoModelForMaskedLM, AutoTokenizer

        m = self.models
        tokenizer = from_hub(AutoTokenizer.from_pretrained, m.masked_filler, m.revision)
        model = from_hub(AutoModelForMaskedLM.from_pretrained, m.masked_filler, m.revision)
        return MLMFiller(model, tokenizer, device=_device())

    def generator(self) -> Generator:
        return self._generator

    def scoring_generator(self) -> HFGenerator:
        """The generator's transformers copy: a judge starts no engine."""
        return self._generator_copy

    def embedder(self) -> SentenceTransformerEmbedder:
        return self._embedder

    def ondevice_lm(self) -> PretrainedLM:
        return self._ondevice

    def conditional_lm(self) -> PretrainedLM:
        return self._conditional

    def public_llm(self) -> PretrainedLM:
        """TinyLlama 1.1B in place of paper 002's LaMDA 2B (a recorded deviation)."""
        return self._public_llm

    def masked_filler(self) -> MLMFiller:
        return self._filler

    def preference_embedder(self) -> SentenceTransformerEmbedder:
        return self._preference_embedder

    def preference_generator(self) -> Generator:
        return self._preference_generator

    def preference_policy(self) -> HFGenerator:
        return self._preference_policy

    def hub_models(self, roles: Iterable[str]) -> list[HubModel]:
        """The roles' hub ids (:class:`PaperModels` names its fields after the roles)."""
        from benchmark.profiles.roles import check_roles

        ids = {role: getattr(self.models, role) for role in check_roles(roles, "paper roles")}
        return hub_requests(ids, self.models.revision)

    def build_caches(self, roles: Iterable[str]) -> None:
        """Fetch the roles' hub snapshots missing from the local cache (offline: fail at
        once, naming every missing one). Loads nothing: the method process loads what it
        uses, and two vLLM engines or ~37 GB of weights in the coordinator would only
        take the memory the run needs."""
        fetch(self.hub_models(roles))

    def accelerator(self) -> str | None:
        return "cuda" if _device() == "cuda" else None

    def training_memory(self) -> TrainingMemory:
        """Paper 003 aligns Pythia-2.8B at batch 64 and PE+SFT fine-tunes the 8B generator
        at batch 24: their full-vocabulary logits and activations are computed 8 examples
        at a time, with gradient checkpointing (a choice, not yet measured on a GPU)."""
        return TrainingMemory(micro_batch_size=8, gradient_checkpointing=True)

    def describe(self) -> dict[str, str]:
        m = self.models
        return {
            "profile": self.name,
            "generator": m.generator,
            "generator_backend": sampling_backend(),
            "ondevice_lm": m.ondevice_lm,
            "conditional_lm": m.conditional_lm,
            "public_llm": f"{m.public_llm} (paper 002's LaMDA 2B is not public)",
            "masked_filler": m.masked_filler,
            "embedder": m.embedder,
            "preference_embedder": m.preference_embedder,
            "preference_generator": m.preference_generator,
            "preference_policy": m.preference_policy,
            "revision": m.revision,
            **{
                dist: distribution_version(dist)
                for dist in ("torch", "transformers", "sentence-transformers", "vllm")
            },
        }
