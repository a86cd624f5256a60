"""vLLM sampling for the ``paper`` generator (used when vLLM and a CUDA GPU are present).

vLLM holds its own copy of the weights, which cannot see in-place fine-tuning of the
transformers model. So vLLM samples only while the weights are untouched: the first access
to ``model`` (the hook SFT/DPO use to fine-tune the generator) switches generation to the
transformers :class:`HFGenerator` for the rest of the run, trading speed for correctness.
Scoring (``logprobs``) always uses transformers. Each prompt gets its own vLLM seed drawn
from ``SamplingParams.seed``, so repeated prompts yield different samples but a batch is
reproducible. Not exercised by the test suite (no GPU, no vLLM there).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from benchmark.profiles.base import Generator, SamplingParams
from benchmark.profiles.hf_generator import HFGenerator, encode_prompts


class VLLMGenerator(Generator):
    def __init__(
        self,
        llm: Any,
        name: str,
        load_transformers: Callable[[], HFGenerator],
    ) -> None:
        self.llm = llm
        self.name = name
        self.tokenizer = llm.get_tokenizer()
        self._load_transformers = load_transformers
        self._hf: HFGenerator | None = None
        self._weights_exposed = False

    def _transformers(self) -> HFGenerator:
        if self._hf is None:
            self._hf = self._load_transformers()
        return self._hf

    @property
    def model(self) -> Any:
        self._weights_exposed = True
        return self._transformers().model

    @model.setter
    def model(self, value: Any) -> None:
        self._weights_exposed = True
        self._transformers().model = value

    def generate(self, prompts: list[str], params: SamplingParams, chat: bool = True) -> list[str]:
        if self._weights_exposed:
            return self._transformers().generate(prompts, params, chat)
        if not prompts:
            return []
        from vllm import SamplingParams as VLLMParams

        requests = [
            {"prompt_token_ids": ids} for ids in encode_prompts(self.tokenizer, prompts, chat)
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
        outputs = self.llm.generate(requests, sampling, use_tqdm=False)
        return [o.outputs[0].text for o in outputs]

    def logprobs(self, prompts: list[str], completions: list[str], chat: bool = True) -> np.ndarray:
        return self._transformers().logprobs(prompts, completions, chat)
