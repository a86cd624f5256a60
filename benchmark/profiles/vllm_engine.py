"""A vLLM engine as the GPU profiles build it, and where a process gets one.

An engine is described by an :class:`EngineSpec` (the model, bf16, LoRA and sleep mode
enabled) and samples token-id prompts with :meth:`VLLMEngine.sample`. It holds the GPU only
while it samples: it wakes for a batch (after ``torch.cuda.empty_cache()``, so the memory
training freed is really free) and goes back to sleep (level 1: weights to CPU RAM, KV cache
dropped) when the batch is done, so training never meets an awake engine, in this process
or another. A caller that samples batch after batch with nothing else on the GPU between
them (a release of a million texts in batches of 256) asks it to stay awake after each
(``stay_awake``) and puts it to sleep with :meth:`VLLMEngine.rest` when done
(:meth:`~benchmark.profiles.base.Generator.sampling_session`): a level-1 sleep and wake
moves every weight to CPU RAM and back.

vLLM cannot start inside the method process's sandbox (its engine binds a TCP port for
torch.distributed and reads ``/proc/meminfo``; the sandbox refuses both, and should). So the
engine lives in the trusted coordinator and the method process reaches it through the one
channel it has (:mod:`benchmark.protocol.engine_calls`): :func:`open_engine` returns what
:func:`route_engines` installed there (the method process's proxy), else a local engine,
one per spec and process (the coordinator's DPPrefSyn candidates and the engine it serves
the method process are the same engine).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from benchmark.profiles.base import EngineSpec, SamplingParams


class SamplingEngine(Protocol):
    """What a :class:`~benchmark.profiles.vllm_generator.VLLMGenerator` samples with: a
    local :class:`VLLMEngine`, or the method process's proxy to the coordinator's."""

    def sample(
        self,
        prompts: list[list[int]],
        params: SamplingParams,
        adapter: Path | None,
        stay_awake: bool = False,
    ) -> list[str]:
        """One completion per token-id prompt; ``adapter``: a peft LoRA adapter directory.
        Asleep again afterwards unless ``stay_awake`` (more batches follow at once)."""
        ...

    def rest(self) -> None:
        """Asleep (a no-op when it is), so the GPU is free for training."""
        ...


def sampling_params(params: SamplingParams, count: int) -> list[Any]:
    """vLLM's parameters for ``count`` prompts: each its own seed drawn from
    ``params.seed``, so repeated prompts yield different samples but a batch is
    reproducible; temperature 0 is greedy."""
    from vllm import SamplingParams as VLLMParams

    greedy = params.temperature <= 0
    return [
        VLLMParams(
            n=1,
            temperature=0.0 if greedy else params.temperature,
            top_p=1.0 if greedy else params.top_p,
            max_tokens=params.max_new_tokens,
            seed=int(seed),
        )
        for seed in np.random.SeedSequence(params.seed).generate_state(count)
    ]


def free_cached_gpu_memory() -> None:
    """Give back what this process's allocator caches, so an engine that wakes (here, or
    in the coordinator) gets the memory training freed."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


class VLLMEngine:
    """A vLLM ``LLM`` built from ``spec``, asleep except while it samples (a batch, or
    the batches of a sampling session)."""

    def __init__(self, spec: EngineSpec) -> None:
        # vLLM forks its engine process unless this process has initialised CUDA; having
        # only asked whether there is a GPU (``runs_on_gpu``) already breaks CUDA in a
        # forked child, so it spawns
        os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = "spawn"
        from vllm import LLM

        self.spec = spec
        self.llm = LLM(
            model=spec.model,
            revision=spec.revision,
            dtype="bfloat16",
            gpu_memory_utilization=spec.gpu_memory_utilization,
            max_model_len=spec.max_model_len,
            enable_lora=True,
            max_lora_rank=spec.max_lora_rank,
            enable_sleep_mode=True,
        )
        self.awake = True
        self.rest()  # built awake; nothing samples until asked
        self._lora_ids = itertools.count(1)

    def sample(
        self,
        prompts: list[list[int]],
        params: SamplingParams,
        adapter: Path | None,
        stay_awake: bool = False,
    ) -> list[str]:
        if not prompts:
            return []
        lora = None
        if adapter is not None:
            from vllm.lora.request import LoRARequest

            lora_id = next(self._lora_ids)  # vLLM caches adapters by id: each batch is new
            lora = LoRARequest(f"adapter#{lora_id}", lora_id, str(adapter.resolve()))
        if not self.awake:
            free_cached_gpu_memory()
            self.llm.wake_up()
            self.awake = True
        try:
            requests = [{"prompt_token_ids": ids} for ids in prompts]
            sampling = sampling_params(params, len(prompts))
            outputs = self.llm.generate(requests, sampling, use_tqdm=False, lora_request=lora)
        finally:
            if not stay_awake:
                self.rest()
        return [o.outputs[0].text for o in outputs]

    def rest(self) -> None:
        if self.awake:
            self.llm.sleep(level=1)
            self.awake = False


_ENGINES: dict[EngineSpec, VLLMEngine] = {}
_route: Callable[[str], SamplingEngine] | None = None


def route_engines(route: Callable[[str], SamplingEngine] | None) -> None:
    """Where this process's profiles get their engines, by role: the method process
    installs its proxy to the coordinator (``None``: local engines)."""
    global _route
    _route = route


def open_engine(role: str, spec: EngineSpec) -> SamplingEngine:
    """The engine that samples ``role``: the installed route's, else this process's engine
    for ``spec`` (built on first use)."""
    if _route is not None:
        return _route(role)
    if spec not in _ENGINES:
        _ENGINES[spec] = VLLMEngine(spec)
    return _ENGINES[spec]
