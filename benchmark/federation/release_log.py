"""The release log: every value the client pool delivered to a method, so that a resumed run
replays what the method already saw instead of drawing that release's noise again.

A run checkpoints after rounds; a run killed mid-round resumes from the last checkpoint and
its method makes the round's calls again. The pool's noise comes from (secret seed, release
index), so recomputing a release that was delivered before the kill would draw the same
noise for it, and a method that asks for a different sum the second time subtracts the two
values and gets an exact sum. So the pool writes each delivery here *before* it returns the
value (to the coordinator, which only then sends it over the wire): the call it answered
(operation and public arguments), the value, the ledger entries it added and the pool's
state after it. On resume, each logged delivery is replayed in order: the same call gets
the logged value, whatever client-side job it sends (nothing is computed: the method gets
back only what it was given), and its ledger entries were charged when the log was opened,
whether or not the method asks again. A call with another operation or other arguments is
refused (:class:`~benchmark.privacy.errors.PrivacyError`, which fails the run); a call past
the log is new, and its release index was never delivered, so its noise is fresh.

The log lives in ``runs/<key>/releases/``, beside the checkpoint and the secret seed; no
untrusted process may read it (their sandboxes grant ``work/``, ``private_diagnostics/`` and
``client_tmp/`` only). Deliveries before the last checkpoint are never replayed, so the
runner prunes them when it checkpoints: the log holds at most one round's releases.

Files: ``<sequence>.pt`` (value and state: tensors and plain data, loaded weights-only, so
reading one runs no code) and then ``<sequence>.json`` (call and ledger entries), each
written atomically; a delivery is logged once its ``.json`` exists.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmark.files import atomic_write
from benchmark.privacy.errors import PrivacyError

ARRAY = "__ndarray__"  # how a numpy array is kept (as a tensor under this key)


def call_of(op: str, args: dict[str, Any]) -> str:
    """A call's fingerprint: the operation and its checked public arguments, as canonical
    JSON."""
    return json.dumps({"op": op, "args": args}, sort_keys=True, default=_plain)


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, tuple | frozenset):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not part of a call's description")


def _to_plain(value: Any) -> Any:
    """``value`` as tensors and plain data (numpy arrays tagged, to come back as arrays)."""
    import torch

    if isinstance(value, np.ndarray):
        return {ARRAY: torch.from_numpy(np.ascontiguousarray(value))}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {k: _to_plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_to_plain(v) for v in value]
    return value


def _from_plain(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {ARRAY}:
            return value[ARRAY].numpy()
        return {k: _from_plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_plain(v) for v in value]
    return value


@dataclass(frozen=True)
class Delivery:
    """One logged delivery: its position in the run, the call and its ledger entries."""

    sequence: int
    call: str
    releases: list[dict[str, Any]]


class ReleaseLog:
    """The deliveries of one run (see the module docstring)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def _path(self, sequence: int, suffix: str) -> Path:
        return self.directory / f"{sequence:08d}{suffix}"

    def write(
        self,
        sequence: int,
        call: str,
        value: Any,
        releases: list[dict[str, Any]],
        state: dict[str, Any],
    ) -> None:
        """Log a delivery (before its value is returned)."""
        import torch

        buffer = io.BytesIO()
        torch.save({"value": _to_plain(value), "state": _to_plain(state)}, buffer)
        atomic_write(self._path(sequence, ".pt"), buffer.getvalue())
        entry = {"sequence": sequence, "call": call, "releases": releases}
        atomic_write(self._path(sequence, ".json"), json.dumps(entry))

    def pending(self, start: int) -> list[Delivery]:
        """The deliveries from ``start`` on, in order (those before were checkpointed);
        a gap, or a file that is not a delivery, is refused."""
        if not self.directory.is_dir():
            return []
        found = {}
        for path in self.directory.glob("*.json"):
            entry = json.loads(path.read_text())
            sequence = entry.get("sequence")
            if type(sequence) is not int or path.name != f"{sequence:08d}.json":
                raise PrivacyError(f"{path}: not a delivery of this run's release log")
            if sequence >= start:
                found[sequence] = Delivery(sequence, str(entry["call"]), list(entry["releases"]))
        if sorted(found) != list(range(start, start + len(found))):
            raise PrivacyError(f"{self.directory}: the release log has a gap after {start}")
        return [found[s] for s in sorted(found)]

    def replay(self, sequence: int) -> tuple[Any, dict[str, Any]]:
        """A logged delivery's value and the pool's state after it (tensors and plain data
        only: loading runs no code)."""
        import torch

        saved = torch.load(self._path(sequence, ".pt"), weights_only=True)
        return _from_plain(saved["value"]), _from_plain(saved["state"])

    def prune(self, before: int) -> None:
        """Forget the deliveries before ``before`` (a checkpoint now holds them)."""
        if not self.directory.is_dir():
            return
        for path in self.directory.iterdir():
            stem = path.name.split(".")[0]
            if stem.isdigit() and int(stem) < before:
                path.unlink()
