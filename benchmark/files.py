"""Files that several processes share. Atomic writes, for every file another process may
read while it is written (a record, an entry, a cache shared by runs, a download): a reader
sees the old file or the whole new one, never half of it. An exclusive lock, which keeps
two processes out of one run directory (two suite workers on one grid), or two runs on the
public schedule off one host."""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import sys
from collections.abc import Iterator
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


class Busy(RuntimeError):
    """Another process holds the lock."""


@contextlib.contextmanager
def exclusive_lock(path: Path, waiting: str | None = None) -> Iterator[None]:
    """Hold an exclusive advisory lock on ``path`` (created if missing) for the block, or
    raise :class:`Busy` at once if another open of it holds one; given ``waiting``, say it
    (on stderr) and wait for the lock instead. The kernel drops the lock when its holder
    exits, killed or not, so a crashed holder never leaves a stale lock."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            if waiting is None:
                raise Busy(f"{path} is locked by another process") from exc
            print(waiting, file=sys.stderr, flush=True)
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
