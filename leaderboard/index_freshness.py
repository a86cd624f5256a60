"""Whether a store's signed index is older than one this machine has already verified.

A copy of a store made before a later publish (a mirror that stopped syncing, an old clone)
passes every other check: its files are as its index lists them and its index is signed.
Only the index's sequence number can show it is stale, and only against one seen before.
``fedsynth leaderboard verify`` remembers the highest sequence it verified for each store
(the id its index carries, which every copy keeps) under the keys that may sign its index
(the published store's maintainers; for another store, the keys its reader accepts), and
refuses a lower one, and another index under the same number (a fork), as TUF clients
refuse a rolled-back snapshot. Indexes from before store ids are not compared. The memory is this
machine's: a machine whose first check is of the stale copy has nothing to compare it with.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmark.files import atomic_write
from leaderboard.store_index import INDEX_FILE, SignedIndex

SEEN_ENV = "FEDSYNTH_VERIFIED_INDEXES"
DEFAULT_SEEN = Path("~/.config/fedsynth/verified_indexes.json")


def seen_path() -> Path:
    """Where this machine keeps the indexes it verified (``$FEDSYNTH_VERIFIED_INDEXES``,
    else beside the signing key): trust state, not a cache."""
    return Path(os.environ.get(SEEN_ENV) or DEFAULT_SEEN).expanduser()


@dataclass(frozen=True)
class VerifiedIndexes:
    """This machine's memory of the indexes it verified, read once per check; the index
    it remembers is the one the check verified, not the file read again."""

    path: Path
    found: dict[str, Any]

    @classmethod
    def read(cls, path: Path) -> VerifiedIndexes:
        try:
            found = json.loads(path.read_text())
        except (OSError, ValueError):
            found = {}
        return cls(path, found if isinstance(found, dict) else {})

    def _last(self, index: SignedIndex) -> dict[str, Any] | None:
        last = self.found.get(_memory_key(index))
        return last if isinstance(last, dict) else None

    def problems(self, root: Path, index: SignedIndex) -> list[tuple[Path, str]]:
        """(index, problem) when ``index`` (``root``'s, verified) is older than, or forks,
        the one this machine verified last of the same store and signers; nothing when it
        has none or the index carries no store id (from before ids)."""
        last = self._last(index) if index.store is not None else None
        if last is None:
            return []
        when = f"verified on {last.get('verified')}"
        if index.sequence < last.get("sequence", 0):
            why = (
                f"stale: sequence {index.sequence}, older than the index this machine {when} "
                f"(sequence {last['sequence']}): a copy of the store from before a later publish"
            )
        elif index.sequence == last.get("sequence") and index.digest != last.get("digest"):
            why = f"forked: another index under sequence {index.sequence} was {when}"
        else:
            return []
        return [(root / INDEX_FILE, f"signed index {why} (--allow-older checks it anyway)")]

    def remember(self, index: SignedIndex) -> None:
        """Record ``index`` as the newest verified for its store and signers, unless one
        with a higher sequence already is (or it carries no store id)."""
        last = self._last(index)
        if index.store is None or (last is not None and last.get("sequence", 0) > index.sequence):
            return
        today = dt.datetime.now(dt.UTC).date().isoformat()
        found = {
            **self.found,
            _memory_key(index): {
                "sequence": index.sequence,
                "digest": index.digest,
                "verified": today,
            },
        }
        atomic_write(self.path, json.dumps(found, indent=1, sort_keys=True) + "\n")


def _memory_key(index: SignedIndex) -> str:
    return f"{index.store} {','.join(index.signers)}"
