"""Where profiles keep what they build once: the tiny tokenizer, the fp32 SmolLM2 copy and
the packaged models assembled from their chunks."""

from __future__ import annotations

import hashlib
import io
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from benchmark.files import atomic_write
from benchmark.profiles.errors import ModelUnavailableError

# Entries of the cache computed from private data, which no untrusted process may read:
# the builders' raw source caches, and the evaluator's reference margins on a split's
# private tuples (its train canaries and test part; benchmark/evaluation/preference_audit.py).
SOURCES, GENERATOR_MARGINS = "sources", "generator_margins"
PRIVATE_ENTRIES = (SOURCES, GENERATOR_MARGINS)


def cache_dir() -> Path:
    """``$FEDSYNTH_CACHE`` if set, else ``$XDG_CACHE_HOME/fedsynth`` (``~/.cache/fedsynth``).

    Created on first use. Entries are written atomically (temp name, then rename), so
    processes that build the same entry concurrently never see a half-written one.
    """
    env = os.environ.get("FEDSYNTH_CACHE")
    if env:
        path = Path(env).expanduser()
    else:
        base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
        path = Path(base).expanduser() / "fedsynth"
    path.mkdir(parents=True, exist_ok=True)
    return path


def save_array(path: Path, array: np.ndarray) -> None:
    """Write ``array`` to ``path`` (``.npy``) atomically: a temp name of this process, then
    a rename, so a concurrent reader sees the old file or the whole new one."""
    buffer = io.BytesIO()
    np.save(buffer, array)
    atomic_write(path, buffer.getvalue())


def sha256_file(path: Path) -> str:
    """The file's sha256, read a megabyte at a time (a packaged model is checked against
    its pinned digest before it is used)."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def pinned_file(target: Path, sha256: str, build: Callable[[Path], None], damaged: str) -> Path:
    """``target`` when it already has ``sha256``; otherwise ``build`` writes it to a temporary
    name beside it, and only a build with the pinned digest is moved into place (else
    :class:`ModelUnavailableError` with ``damaged``), so no reader sees a partial or wrong file."""
    if target.exists() and sha256_file(target) == sha256:
        return target
    tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    try:
        try:
            build(tmp)
        except ValueError as exc:  # a builder's own integrity check
            raise ModelUnavailableError(damaged) from exc
        if sha256_file(tmp) != sha256:
            raise ModelUnavailableError(damaged)
        tmp.replace(target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def private_caches() -> tuple[Path, ...]:
    """The cache's entries computed from private data (:data:`PRIVATE_ENTRIES`)."""
    return tuple(cache_dir() / name for name in PRIVATE_ENTRIES)
