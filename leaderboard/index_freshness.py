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
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from benchmark.files import atomic_write
from leaderboard.entries import content_digest
from leaderboard.schema import EntryError
from leaderboard.signing import index_signers
from leaderboard.store_index import INDEX_FILE, SignedIndex, read_index

SEEN_ENV = "FEDSYNTH_VERIFIED_INDEXES"
DEFAULT_SEEN = Path("~/.config/fedsynth/verified_indexes.json")


def seen_path() -> Path:
    """Where this machine keeps the indexes it verified (``$FEDSYNTH_VERIFIED_INDEXES``,
    else beside the signing key): trust state, not a cache."""
    return Path(os.environ.get(SEEN_ENV) or DEFAULT_SEEN).expanduser()


def _seen(path: Path) -> dict[str, Any]:
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def _verified(root: Path, keys: dict[str, Ed25519PublicKey]) -> tuple[str, SignedIndex, str]:
    """The store's memory key (its id and signer set), its index, and the index's digest;
    :class:`EntryError` when the index does not verify or carries no store id."""
    index = read_index(root, keys)
    if index.store is None:
        raise EntryError("an index from before store ids")
    signers = ",".join(sorted(index_signers(keys, root)))
    digest = content_digest(json.loads((root / INDEX_FILE).read_text()))
    return f"{index.store} {signers}", index, digest


def stale_index(
    root: Path, keys: dict[str, Ed25519PublicKey], seen: Path
) -> list[tuple[Path, str]]:
    """(index, problem) when ``root``'s index is older than, or forks, the one this machine
    verified last of the same store and signers; nothing when it has none (the index's own
    problems are :func:`~leaderboard.store_index.check_index`'s)."""
    try:
        signers, index, digest = _verified(root, keys)
    except EntryError:
        return []
    last = _seen(seen).get(signers)
    if not isinstance(last, dict):
        return []
    when = f"verified on {last.get('verified')}"
    if index.sequence < last.get("sequence", 0):
        why = (
            f"stale: sequence {index.sequence}, older than the index this machine {when} "
            f"(sequence {last['sequence']}): a copy of the store from before a later publish"
        )
    elif index.sequence == last.get("sequence") and digest != last.get("digest"):
        why = f"forked: another index under sequence {index.sequence} was {when}"
    else:
        return []
    return [(root / INDEX_FILE, f"signed index {why} (--allow-older checks it anyway)")]


def remember_index(root: Path, keys: dict[str, Ed25519PublicKey], seen: Path) -> None:
    """Record ``root``'s index as the newest verified for its signers, unless an index with
    a higher sequence already is."""
    try:
        signers, index, digest = _verified(root, keys)
    except EntryError:
        return
    found = _seen(seen)
    last = found.get(signers)
    if isinstance(last, dict) and last.get("sequence", 0) > index.sequence:
        return
    today = dt.datetime.now(dt.UTC).date().isoformat()
    found[signers] = {"sequence": index.sequence, "digest": digest, "verified": today}
    atomic_write(seen, json.dumps(found, indent=1, sort_keys=True) + "\n")
