"""Saved state that must load back without running code: checkpoints, method states,
clients' memos and weights that cross the trust boundary.

Run directories share a host with other submissions' runs, and method states come from
untrusted processes, so everything here is loaded with torch's weights-only loader
(tensors, plain data and the data-only types of :data:`CHECKPOINT_TYPES`) and saved only
once it is known to load back that way (:func:`save_checked`): a state only code could
rebuild fails in the round that made it, not at resume. Imported by both trust domains
(the runner and the coordinator; the method process and the client worker), so it imports
neither.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from benchmark.federation.costs import CostCounters

HINT = "a checkpoint keeps tensors, numbers, strings, lists, dicts and numpy arrays only"


def _checkpoint_types() -> list[Any]:
    """What a checkpoint may hold beyond torch's weights-only defaults: the pool's cost
    counters and numpy arrays and scalars of numeric, bool or string dtypes (client memos,
    tree prefixes, method scores). Each only carries data, so rebuilding one runs no code
    of the file's choosing; object arrays stay refused."""
    rebuild_array = np.zeros(1).__reduce__()[0]  # what pickle names, whatever numpy's layout
    rebuild_scalar = np.float64(0).__reduce__()[0]
    dtypes = {type(np.dtype(code)) for code in "?bhilqBHILQefdFDSU"}
    return [CostCounters, np.ndarray, np.dtype, rebuild_array, rebuild_scalar, *dtypes]


CHECKPOINT_TYPES = _checkpoint_types()


class UnsafeCheckpointError(pickle.UnpicklingError):
    """A checkpoint that cannot be loaded without running code, or not one of this run."""


def seed_torch(seed: int, round_index: int) -> None:
    """torch's global seed for one round of a method (``-1``: setup), the same when a run
    resumes from its checkpoint."""
    import torch  # imported when needed: an untrusted process starts without it

    torch.manual_seed(seed * 1_000_003 + round_index + 1)


def load_checkpoint(path: Path | BinaryIO, *, mmap: bool = False, cpu: bool = False) -> Any:
    """``torch.load`` of tensors and plain data only (plus :data:`CHECKPOINT_TYPES`): a
    planted pickle fails here instead of running its code. The error gives the reason.
    Tensors load on the device they were saved from, or with ``cpu`` on the CPU (a process
    that only checks or forwards them, and needs no second copy on the GPU)."""
    import torch  # imported when needed: an untrusted process starts without it

    try:
        with torch.serialization.safe_globals(CHECKPOINT_TYPES):
            location = "cpu" if cpu else None
            return torch.load(path, weights_only=True, mmap=mmap, map_location=location)
    except Exception as exc:
        raise UnsafeCheckpointError(_refusal(path, exc)) from exc


def _refusal(path: Path | BinaryIO, exc: Exception) -> str:
    """Why a checkpoint was refused, in one line: the globals it would import (the code a
    planted pickle runs), else the kind of failure."""
    import torch  # imported when needed: an untrusted process starts without it

    try:
        found = torch.serialization.get_unsafe_globals_in_checkpoint(path)
    except Exception:  # not even a torch checkpoint: the failure's kind says enough
        found = []
    allowed = {f"{t.__module__}.{t.__qualname__}" for t in CHECKPOINT_TYPES}
    unsafe = sorted(set(found) - allowed)
    if unsafe:
        return f"it holds {', '.join(unsafe)}, which loading would have to import"
    return f"it does not load as tensors and plain data ({type(exc).__name__})"


def load_state_blob(blob: bytes, *, cpu: bool = False) -> Any:
    """A method state (or weights, or memos) saved as bytes, loaded as a checkpoint is:
    tensors and plain data only (``cpu``: as :func:`load_checkpoint`)."""
    try:
        return load_checkpoint(io.BytesIO(blob), cpu=cpu)
    except UnsafeCheckpointError as exc:
        raise UnsafeCheckpointError(f"method state: {exc}") from exc


def save_checked(state: Any, target: Path | None, where: str) -> bytes:
    """Save ``state`` (to the file ``target``, else to the bytes returned) once it is known
    to load back as :func:`load_checkpoint` loads it; else an
    :class:`UnsafeCheckpointError` naming ``where`` (and no file left behind)."""
    import torch  # imported when needed: an untrusted process starts without it

    buffer = io.BytesIO()
    try:
        if target is None:
            torch.save(state, buffer)
            load_checkpoint(io.BytesIO(buffer.getvalue()), cpu=True)
        else:
            torch.save(state, target)
            load_checkpoint(target, mmap=True, cpu=True)
    except (UnsafeCheckpointError, pickle.PicklingError, TypeError, AttributeError) as exc:
        if target is not None:
            target.unlink(missing_ok=True)
        reason = " ".join(str(exc).split())
        raise UnsafeCheckpointError(f"{where}: {reason}; {HINT}") from exc
    return buffer.getvalue()


def pack_memos(memos: list[Any]) -> bytes:
    """Clients' memos as one blob (what a checkpoint stores, unopened)."""
    import torch  # imported when needed: an untrusted process starts without it

    buffer = io.BytesIO()
    torch.save(memos, buffer)
    return buffer.getvalue()


def unpack_memos(blob: bytes) -> list[Any]:
    """A memo blob, opened with torch's weights-only loader (no code runs)."""
    import torch  # imported when needed: an untrusted process starts without it

    with torch.serialization.safe_globals(CHECKPOINT_TYPES):
        return torch.load(io.BytesIO(blob), weights_only=True)
