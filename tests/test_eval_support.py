"""Shared fixtures for the evaluator tests: a tiny GPT-2 profile and template corpora.

Everything is built locally in a second or two (byte-level BPE trained on the test corpus,
2-layer GPT-2 from a config, a hashed bag-of-words embedder), so the evaluator is tested
against real models and real embeddings without any hub access.
"""

from __future__ import annotations

import hashlib
import os
import re

import numpy as np
import torch
from threadpoolctl import threadpool_limits

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
# Tiny models and 384-d eigendecompositions run ~10x faster on one thread than on two
# contended ones (measured on the 2-core CI machine).
torch.set_num_threads(1)
threadpool_limits(1)

from benchmark.data import FederatedSplit  # noqa: E402
from benchmark.profiles.base import (  # noqa: E402
    Embedder,
    Generator,
    MaskedFiller,
    ModelProfile,
    OnDeviceLM,
)
from benchmark.profiles.hf_generator import HFGenerator  # noqa: E402

ANIMALS = ["cat", "dog", "horse", "bird", "fox", "goat", "sheep", "mouse"]
VERBS = ["sees", "finds", "follows", "watches", "chases", "hears"]
PLACES = ["river", "garden", "field", "house", "market", "forest"]
TOPICS = {
    "farm": "the {a} {v} the {b} near the {p}.",
    "city": "a {a} in the {p} {v} a small {b} today.",
    "tale": "once upon a time the {a} {v} the old {b} by the {p}.",
}


def template_texts(n: int, seed: int, topic: str = "farm") -> list[str]:
    """``n`` sentences of one topic, drawn with ``seed``."""
    rng = np.random.default_rng(seed)
    pick = lambda xs: xs[rng.integers(len(xs))]  # noqa: E731
    return [
        TOPICS[topic].format(a=pick(ANIMALS), b=pick(ANIMALS), v=pick(VERBS), p=pick(PLACES))
        for _ in range(n)
    ]


def random_word_texts(n: int, seed: int, length: int = 12) -> list[str]:
    """Unpredictable word sequences: only memorisation makes them likely."""
    rng = np.random.default_rng(seed)
    vocab = ANIMALS + VERBS + PLACES
    return [" ".join(rng.choice(vocab, size=length)) for _ in range(n)]


def train_tokenizer(corpus: list[str], vocab_size: int = 300):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>"
    )


def tiny_gpt2(vocab_size: int, seed: int):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    config = GPT2Config(
        vocab_size=vocab_size,
        n_layer=2,
        n_embd=64,
        n_head=2,
        n_positions=128,
        bos_token_id=0,
        eos_token_id=0,
    )
    return GPT2LMHeadModel(config).eval()


class TinyLM(OnDeviceLM):
    name = "tiny-gpt2"

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer

    def build(self, seed: int):
        return tiny_gpt2(len(self.tokenizer), seed)


class HashEmbedder(Embedder):
    """Signed hashed bag of words, unit-normalised: texts sharing words lie close."""

    name = "hash-bow-64"
    dim = 64

    def __init__(self) -> None:
        self.calls = 0

    def embed(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                digest = hashlib.sha256(word.encode()).digest()
                out[row, digest[0] % self.dim] += 1.0 if digest[1] % 2 else -1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.maximum(norms, 1e-12)


class TinyProfile(ModelProfile):
    name = "tiny-test"

    def __init__(self, corpus: list[str]) -> None:
        self.tokenizer = train_tokenizer(corpus)
        self._lm = TinyLM(self.tokenizer)
        self._embedder = HashEmbedder()
        model = tiny_gpt2(len(self.tokenizer), seed=123)
        self._generator = HFGenerator(model, self.tokenizer, name="tiny-test-generator")

    def generator(self) -> Generator:
        return self._generator

    def embedder(self) -> Embedder:
        return self._embedder

    def ondevice_lm(self) -> OnDeviceLM:
        return self._lm

    def masked_filler(self) -> MaskedFiller | None:
        return None

    def describe(self) -> dict[str, str]:
        return {"ondevice_lm": TinyLM.name, "embedder": HashEmbedder.name}


def records(texts: list[str], part: str, per_client: int = 4, label: str | None = None):
    return [
        {
            "text": t,
            "client_id": f"{part}-{i // per_client}",
            "date": "2024-01-01",
            "label": label,
            "source_id": f"{part}-{i}",
        }
        for i, t in enumerate(texts)
    ]


def make_split(
    train: list[str], validation: list[str], test: list[str], public: list[str] | None = None
) -> FederatedSplit:
    parts = {"train": train, "validation": validation, "test": test, "public": public or []}
    return FederatedSplit(
        name="eval-test",
        manifest={"version": "test"},
        parts={k: records(v, k) for k, v in parts.items()},
    )
