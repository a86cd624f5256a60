"""Sentence embedders: a hashed n-gram embedder (``tiny``) and sentence-transformers models."""

from __future__ import annotations

import hashlib
import math
import re
from collections import Counter
from functools import lru_cache
from typing import Any

import numpy as np

from benchmark.profiles.base import Embedder
from benchmark.progress import progress

EMBED_CHUNK = 4096

_WORD = re.compile(r"\w+", re.UNICODE)


@lru_cache(maxsize=1 << 16)
def _bucket(feature: str, dim: int) -> tuple[int, float]:
    """Stable (process-independent) hash of a feature to a bucket and a sign."""
    digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
    value = int.from_bytes(digest, "little")
    return value % dim, 1.0 if (value >> 63) & 1 else -1.0


class HashedNgramEmbedder(Embedder):
    """Deterministic, model-free embedder for unit tests.

    Features are lower-cased words plus character n-grams (``ngram_range``) of each word
    padded with spaces, so texts sharing words or word pieces land close together.
    Counts are damped as ``1 + log(tf)`` (the TF part of TF-IDF; there is no corpus for IDF),
    hashed with signed feature hashing into ``dim`` buckets (a fixed random projection of the
    sparse vector), and L2-normalised. Texts without any word map to one fixed feature, so
    every output has unit norm.
    """

    def __init__(self, dim: int = 384, ngram_range: tuple[int, int] = (3, 5)) -> None:
        self.dim = dim
        self.ngram_range = ngram_range
        self.name = f"hashed-ngrams(dim={dim},n={ngram_range[0]}-{ngram_range[1]})"

    def _features(self, text: str) -> Counter[str]:
        words = _WORD.findall(text.lower())
        feats: Counter[str] = Counter(f"w:{w}" for w in words)
        lo, hi = self.ngram_range
        for word in words:
            padded = f" {word} "
            for n in range(lo, hi + 1):
                feats.update(f"c:{padded[i : i + n]}" for i in range(len(padded) - n + 1))
        return feats or Counter({"<empty>": 1})

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for feature, count in self._features(text).items():
                bucket, sign = _bucket(feature, self.dim)
                out[row, bucket] += sign * (1.0 + math.log(count))
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.maximum(norms, 1e-12)


class SentenceTransformerEmbedder(Embedder):
    """A sentence-transformers model (all-MiniLM-L6-v2), batched and unit-normalised."""

    def __init__(self, model: Any, name: str, batch_size: int = 64) -> None:
        self.model = model
        self.name = name
        self.batch_size = batch_size
        self.dim = int(model.get_embedding_dimension())

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        texts = list(texts)
        chunk = EMBED_CHUNK  # progress granularity; sentence-transformers sorts within a chunk
        starts = range(0, len(texts), chunk)
        vectors = [
            self.model.encode(
                texts[start : start + chunk],
                batch_size=self.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
            for start in progress(starts, f"embed {len(texts)} texts", unit="chunk")
        ]
        return np.concatenate(vectors).astype(np.float32, copy=False)
