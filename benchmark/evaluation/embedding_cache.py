"""Embed each text set once per run: in memory, and on disk under the run's work dir.

FID, MAUVE, DCR and classification all embed the same synthetic and real sets; the cache
key is sha256 over the embedder name and the exact texts (order included), so a changed
set or another embedder never reuses stale vectors.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from benchmark.profiles.base import Embedder
from benchmark.profiles.cache import save_array


def text_set_key(embedder_name: str, texts: list[str]) -> str:
    payload = json.dumps([embedder_name, texts], ensure_ascii=False).encode()
    return hashlib.sha256(payload).hexdigest()


class EmbeddingCache:
    """Memoises ``embedder.embed`` per text set; ``directory=None`` keeps it in memory only."""

    def __init__(self, embedder: Embedder, directory: Path | None) -> None:
        self.embedder = embedder
        self.directory = directory
        self._memory: dict[str, np.ndarray] = {}
        self.misses = 0

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.embedder.dim), dtype=np.float32)
        key = text_set_key(self.embedder.name, texts)
        if key in self._memory:
            return self._memory[key]
        path = self.directory / f"{key}.npy" if self.directory is not None else None
        if path is not None and path.is_file():
            vectors = np.load(path)
        else:
            self.misses += 1
            vectors = np.asarray(self.embedder.embed(texts), dtype=np.float32)
            if vectors.shape != (len(texts), self.embedder.dim):
                raise ValueError(
                    f"embedder {self.embedder.name!r} returned shape {vectors.shape}, "
                    f"expected {(len(texts), self.embedder.dim)}"
                )
            if path is not None:
                save_array(path, vectors)  # two suite workers may embed the same texts
        self._memory[key] = vectors
        return vectors
