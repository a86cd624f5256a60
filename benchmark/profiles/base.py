"""The model interfaces every profile (``tiny``, ``cpu``, ``paper``) implements.

Methods and the evaluator only talk to these interfaces, so the same code runs with a
random tiny GPT-2 in the unit tests, SmolLM2/MiniLM on a CPU, and the papers' hub models
on a GPU.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from benchmark.profiles.hub_fetch import HubModel


@dataclass(frozen=True)
class SamplingParams:
    """How to sample from a generator; ``seed`` makes a batch reproducible.

    ``temperature`` 0 is greedy decoding. Values come from method configs (a submitter's
    too), so they are checked here, where every generator's sampling starts, rather than
    left to fail deep in a decode loop or to sample from a silently degenerate distribution.
    """

    max_new_tokens: int = 64
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.max_new_tokens < 0:  # 0 is allowed: empty texts, as generators define it
            raise ValueError(f"max_new_tokens must be >= 0, got {self.max_new_tokens}")
        if not 0 <= self.temperature < float("inf"):
            raise ValueError(f"temperature must be finite and >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")


def context_length(model: Any) -> int:
    """Maximum number of positions the model accepts."""
    config = model.config
    for attr in ("n_positions", "max_position_embeddings"):
        value = getattr(config, attr, None)
        if value:
            return int(value)
    raise ValueError(f"cannot tell the context length of {type(model).__name__}")


@dataclass(frozen=True)
class EngineSpec:
    """The vLLM engine a profile samples a role with: ``model`` (hub id or directory) at
    ``revision`` (:mod:`benchmark.profiles.vllm_engine`)."""

    model: str
    revision: str | None
    gpu_memory_utilization: float
    max_model_len: int
    max_lora_rank: int = 16  # vLLM's default; the papers' adapters have rank 4


class Generator(ABC):
    """A causal LLM that writes synthetic text on the server (it never sees private data)."""

    model: Any  # a torch.nn.Module (HF causal LM); fine-tuned in place by SFT/DPO
    tokenizer: Any

    @abstractmethod
    def generate(self, prompts: list[str], params: SamplingParams, chat: bool = True) -> list[str]:
        """Batched sampling; with ``chat`` the prompt goes through the chat template if any."""

    @abstractmethod
    def logprobs(self, prompts: list[str], completions: list[str], chat: bool = True) -> np.ndarray:
        """Sum of log-probabilities of each completion given its prompt (formatted as in
        ``generate``: through the chat template when ``chat`` and the model has one)."""

    @property
    def max_positions(self) -> int:
        """How many tokens (prompt + new tokens) one sample may hold."""
        return context_length(self.model)

    def adapted(self, model: Any) -> AbstractContextManager[None]:
        """Inside the block, :meth:`generate` samples from ``model``: :attr:`model` with a
        peft LoRA adapter injected (POPri's DPO policy, PE+SFT's SFT), or :attr:`model`
        itself after a full fine-tune in place. A generator that cannot sample from it
        raises rather than sample from other weights."""
        raise NotImplementedError(f"{type(self).__name__} cannot sample from an adapted model")

    def sampling_session(self) -> AbstractContextManager[None]:
        """A block of consecutive :meth:`generate` calls with nothing trained or scored
        between them. A generator that lends the GPU back between calls (a vLLM engine
        sleeps after each, so training never meets it awake) keeps it for the whole block
        instead: one wake and one sleep, not one per batch. A no-op here."""
        return nullcontext()


class Embedder(ABC):
    """A sentence embedder (all-MiniLM-L6-v2 in ``cpu``/``paper``)."""

    name: str
    dim: int

    @abstractmethod
    def embed(self, texts: list[str]) -> np.ndarray:
        """Unit-normalised float32 embeddings, shape (len(texts), dim), batched."""


class OnDeviceLM(ABC):
    """The small LM trained on clients or on synthetic data, and evaluated on test clients.

    ``device`` is where its models live and train: the profile's accelerator on a GPU
    profile (:meth:`ModelProfile.lm_device`), so the public start, the downstream fits and
    the DP-FL clients' local steps run there, not on the CPU beside the GPU."""

    name: str
    tokenizer: Any
    device: str = "cpu"

    def new_model(self, seed: int) -> Any:
        """A fresh model (the profile's public starting point) on ``device``, in eval mode;
        deterministic given seed (it is built on the CPU, so the device never changes it)."""
        return self.build(seed).to(self.device).eval()

    @abstractmethod
    def build(self, seed: int) -> Any:
        """The fresh model of ``seed`` on the CPU."""


class MaskedFiller(ABC):
    """Fills masked spans of a text (PrE-Text's variation operator)."""

    @abstractmethod
    def fill(self, texts: list[str], mask_fraction: float, seed: int) -> list[str]:
        """Return one variation per text with ``mask_fraction`` of its tokens re-filled."""


@dataclass(frozen=True)
class TrainingMemory:
    """How the harness fits a training batch in memory on a profile's hardware: parts of
    ``micro_batch_size`` examples whose gradients are accumulated (0: the whole batch at
    once), and gradient checkpointing. They change how a batch is computed, not what: the
    loss and its gradient are the whole batch's (up to float rounding)."""

    micro_batch_size: int = 0
    gradient_checkpointing: bool = False


class ModelProfile(ABC):
    """Bundle of the models of one profile; each is built on first use and cached."""

    name: str

    @abstractmethod
    def generator(self) -> Generator: ...

    def scoring_generator(self) -> Generator:
        """The generator's weights for log-probabilities only (a judge reads them, never
        samples). Default: the generator; a profile that samples with an engine (vLLM)
        gives its transformers copy, so scoring starts no engine."""
        return self.generator()

    def engine_spec(self, role: str) -> EngineSpec | None:
        """The vLLM engine that samples ``role`` here (``None``: no engine; the default).
        The coordinator builds it from this, its own profile's answer, when the method
        process asks to sample ``role`` (:mod:`benchmark.isolation.engine_service`)."""
        return None

    @abstractmethod
    def embedder(self) -> Embedder: ...

    @abstractmethod
    def ondevice_lm(self) -> OnDeviceLM: ...

    def conditional_lm(self) -> OnDeviceLM:
        """The causal LM that paper 001 fine-tunes on the clients as its conditional
        generator (the harness's local DP-SGD trains it). Default: the on-device LM."""
        return self.ondevice_lm()

    def public_llm(self) -> OnDeviceLM:
        """The public LLM paper 002 uses three ways: its tokenizer is the small on-device
        LMs' vocabulary, it is the distillation teacher, and it scores public records
        (log p_pub) for distribution matching. Paper 002's LaMDA 2B is not public; the
        default is the profile's conditional LM (SmolLM2-135M in ``cpu``)."""
        return self.conditional_lm()

    def preference_embedder(self) -> Embedder:
        """ψ of paper 003's synthesis: it embeds "prompt;response" texts for the private
        differences and the scored candidates (bge-large-en-v1.5 in the paper). Default:
        the profile's embedder."""
        return self.embedder()

    def preference_generator(self) -> Generator:
        """Writes paper 003's candidate responses to public prompts (Llama-2-7b-chat in
        the paper). Default: the profile's generator."""
        return self.generator()

    def preference_policy(self) -> Generator:
        """The downstream model of the preference track (Pythia-2.8B in paper 003): the
        ε = 0 base model, what DP-FT fine-tunes, what a preference release is aligned on
        and the reference of the alignment metrics. Default: the profile's generator."""
        return self.generator()

    @abstractmethod
    def masked_filler(self) -> MaskedFiller | None:
        """The profile's masked-fill model, or None if it has none."""

    @abstractmethod
    def describe(self) -> dict[str, str]:
        """Model ids/revisions recorded in result records."""

    def lm_device(self) -> str:
        """Where this profile's on-device, conditional and public LMs live and train."""
        return self.accelerator() or "cpu"

    def training_memory(self) -> TrainingMemory:
        """How SFT and DPO of this profile's models fit their batches in memory (the
        downstream policy's alignment, PE+SFT's fine-tune); a spec's ``alignment`` settings
        override it. Default: whole batches, no checkpointing."""
        return TrainingMemory()

    def accelerator(self) -> str | None:
        """The accelerator this profile's models run on (``"cuda"``), None on the CPU. The
        trusted coordinator reads it to open a run's sandboxes to the GPU (a GPU run:
        docs/architecture.md, "A GPU shared with untrusted code"); a method never sets it."""
        return None

    def build_caches(self, roles: Iterable[str]) -> None:
        """Resolve the models of ``roles`` (names in :data:`~benchmark.profiles.roles.ROLES`)
        so that every on-disk cache they read (converted weights, a pretrained on-device LM,
        a trained tokenizer, a hub snapshot) exists. The trusted coordinator does this for a
        run's declared roles before a sandboxed method process starts: that process may read
        the caches, never write them. Default: build each role's model once."""
        from benchmark.profiles.roles import check_roles

        for role in check_roles(roles, "model roles"):
            getattr(self, role)()  # each is cached inside the profile

    def hub_models(self, roles: Iterable[str]) -> list[HubModel]:
        """The hub snapshots ``roles`` load, each with the roles it fills (``fedsynth models
        fetch`` downloads them). Default: none; only ``paper`` loads hub models."""
        return []


def bind_public(profile: Any, texts: Sequence[str]) -> None:
    """Give ``profile`` the split's public texts before any model is used, where a model
    takes something from them (``cpu-gemma``'s output vocabulary: the profile's own
    ``bind_public``); other profiles have nothing to bind."""
    bind = getattr(profile, "bind_public", None)
    if bind is not None:
        bind(texts)
