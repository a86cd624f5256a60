"""The ``tiny`` profile: random tiny GPT-2s on a locally trained BPE; runs in seconds.

For unit tests and smoke runs only: the generator and the on-device LM are random-init
GPT-2s (2 layers, 64 wide, 128 positions), the embedder is the hashed n-gram embedder and
the masked filler is the causal span filler on the tiny generator (no instruction: a random
model cannot follow one, so masked tokens are conditioned on the left context only).
"""

from __future__ import annotations

from functools import cached_property

from benchmark.profiles.base import ModelProfile
from benchmark.profiles.embedders import HashedNgramEmbedder
from benchmark.profiles.fillers import CausalSpanFiller
from benchmark.profiles.hf_generator import HFGenerator
from benchmark.profiles.ondevice import GPT2Shape, RandomGPT2LM
from benchmark.profiles.packaged import distribution_version
from benchmark.profiles.tokenizer_builders import tiny_tokenizer, tiny_tokenizer_key

TINY_SHAPE = GPT2Shape(n_layer=2, n_embd=64, n_head=2, n_positions=128)
GENERATOR_SEED = 0


class TinyProfile(ModelProfile):
    name = "tiny"

    @cached_property
    def _lm(self) -> RandomGPT2LM:
        return RandomGPT2LM(tiny_tokenizer(), TINY_SHAPE)

    @cached_property
    def _generator(self) -> HFGenerator:
        model = self._lm.new_model(GENERATOR_SEED)
        label = f"{TINY_SHAPE.label()}@seed{GENERATOR_SEED}"
        return HFGenerator(model, self._lm.tokenizer, label)

    @cached_property
    def _embedder(self) -> HashedNgramEmbedder:
        return HashedNgramEmbedder()

    @cached_property
    def _filler(self) -> CausalSpanFiller:
        return CausalSpanFiller(self._generator)

    def generator(self) -> HFGenerator:
        return self._generator

    def embedder(self) -> HashedNgramEmbedder:
        return self._embedder

    def ondevice_lm(self) -> RandomGPT2LM:
        return self._lm

    def masked_filler(self) -> CausalSpanFiller:
        return self._filler

    def describe(self) -> dict[str, str]:
        return {
            "profile": self.name,
            "tokenizer": f"tiny-bytelevel-bpe-{tiny_tokenizer_key()}",
            "generator": f"{TINY_SHAPE.label()} random init, seed {GENERATOR_SEED}",
            "embedder": HashedNgramEmbedder().name,
            "ondevice_lm": f"{TINY_SHAPE.label()} random init, seed per run",
            "masked_filler": "causal span filler on the generator (no instruction)",
            "public_llm": "the on-device LM (random init): paper 002's LaMDA 2B is not public",
            "torch": distribution_version("torch"),
            "transformers": distribution_version("transformers"),
            "tokenizers": distribution_version("tokenizers"),
        }
