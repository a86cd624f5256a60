"""Where profiles keep what they build once: the tiny tokenizer and the fp32 SmolLM2 copy."""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path

import numpy as np

from benchmark.files import atomic_write


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
