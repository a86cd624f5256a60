"""Atomic file writes, for every file another process may read while it is written (a
record, an entry, a cache shared by runs, a download): a reader sees the old file or the
whole new one, never half of it."""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def atomic_write(path: Path, data: bytes | str) -> None:
    """Write ``data`` (text as UTF-8) to a temporary name of this process beside ``path``,
    flush it to disk, then rename it over ``path``; the parent directory is created."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.part")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data.encode() if isinstance(data, str) else data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
