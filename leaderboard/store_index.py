"""The store's signed index: every entry, kept run record, tuning report, version definition
and split manifest of a results store, by path, with the digest of its content, signed like
an entry.

A signature on each file proves that file is as some accepted key wrote it; it cannot show
that a file is missing, nor that an older signed file was put back (a superseded entry, a
re-submitted copy). The index can: ``leaderboard verify`` refuses a file the index does not
list, a listed file that is gone, and a file whose content is not the listed digest (an
edit, even re-signed by an accepted key).

One index for the whole store (``<store>/_signed_index.json``), not one per leaderboard
version: a deleted version directory would take its own index with it, and one file is one
signature to check and one diff to review.

Each index carries the store's id (minted by its first index, kept by every copy) and a
sequence number, one more than the index it replaced. A copy of the store made before a
later publish (a mirror, an old clone) is self-consistent and signed; only its sequence can
show it is older than one of the same store this machine has already verified
(:mod:`leaderboard.index_freshness`).

The publish path updates it (:func:`update_index`): it adds or replaces only the files it
has just written and drops the ones it removed, keeping the rest as signed, so a routine
publish never vouches for a file it did not write (an edit made elsewhere in the store stays
detected). ``fedsynth leaderboard index`` rebuilds it whole, once the store passes every
other check (:func:`leaderboard.verify.index_store`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from benchmark.files import atomic_write
from leaderboard.entries import content_digest
from leaderboard.schema import EntryError
from leaderboard.signing import (
    INDEX_SIGNERS,
    KEYS_DIR,
    index_signers,
    key_id,
    sign_entry,
    verified_body,
)
from leaderboard.store import (
    MANIFESTS_DIR,
    VERSION_FILE,
    entry_files,
    record_files,
    tuning_files,
)

INDEX_FILE = "_signed_index.json"
KIND = "fedsynth store index v1"


def indexed_files(root: Path) -> list[Path]:
    """What the index covers: entries, kept run records, tuning reports, and each version's
    definition and split manifests (which version a track shows, by when it was started,
    and what its split is said to be)."""
    described = [*root.glob(f"lb-*/{VERSION_FILE}"), *root.glob(f"lb-*/{MANIFESTS_DIR}/*.json")]
    return sorted([*entry_files(root), *record_files(root), *tuning_files(root), *described])


def file_digest(path: Path) -> str:
    return content_digest(json.loads(path.read_text()))


def _name(root: Path, path: Path) -> str:
    return path.relative_to(root).as_posix()


@dataclass(frozen=True)
class SignedIndex:
    files: dict[str, str]  # path relative to the store → content digest
    sequence: int  # one more than the index it replaced (0: from before sequences)
    store: str | None  # the store's id, kept by every copy (None: from before ids)
    digest: str  # the signed file's content digest: tells two indexes of one sequence apart
    signers: tuple[str, ...]  # the key ids that may sign this store's index, as checked


def read_index(root: Path, keys: dict[str, Ed25519PublicKey]) -> SignedIndex:
    """The store's index, once its signature verifies with one of ``keys`` that may sign
    an index (:func:`~leaderboard.signing.index_signers`); :class:`EntryError` when it is
    missing, malformed or not so signed."""
    path = root / INDEX_FILE
    if not path.exists():
        raise EntryError(
            "no signed index: deletions and re-submitted files cannot be told "
            "(`fedsynth leaderboard index` writes one)"
        )
    try:
        signed = json.loads(path.read_text())
        signers = index_signers(keys, root)
        kid = (signed.get("signature") or {}).get("key_id")
        if kid in keys and kid not in signers:
            raise EntryError(_NOT_A_SIGNER.format(kid=kid))
        body = verified_body(signed, signers)
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
        raise EntryError(f"malformed: {exc}") from exc
    files, sequence, store = body.get("files"), body.get("sequence", 0), body.get("store")
    if body.get("kind") != KIND or not isinstance(files, dict):
        raise EntryError(f"not a {KIND!r}")
    if not isinstance(sequence, int) or isinstance(sequence, bool) or sequence < 0:
        raise EntryError(f"malformed: sequence {sequence!r}")
    if store is not None and not isinstance(store, str):
        raise EntryError(f"malformed: store {store!r}")
    return SignedIndex(files, sequence, store, content_digest(signed), tuple(sorted(signers)))


def _carried(root: Path) -> tuple[int, str]:
    """The sequence and store id a new index of ``root`` gets: one more than the present
    index's, and its id (a new one for a store without), read without checking its
    signature (a forged number can only make the next one larger)."""
    try:
        old = json.loads((root / INDEX_FILE).read_text())
        sequence, store = old.get("sequence", 0), old.get("store")
    except (OSError, ValueError, AttributeError):
        sequence, store = 0, None
    if not isinstance(sequence, int) or sequence < 0:
        sequence = 0
    return sequence + 1, store if isinstance(store, str) else uuid.uuid4().hex


_NOT_A_SIGNER = (
    "signed by key {kid}, which may sign entries but not this store's index (the "
    f"repository's {KEYS_DIR}/{INDEX_SIGNERS} does not name it)"
)


def write_index(root: Path, files: dict[str, str], key: Ed25519PrivateKey) -> Path:
    """Sign and write the index, numbered after the one it replaces; :class:`EntryError`
    when ``key`` may not sign this store's index (it would never verify)."""
    public = key.public_key()
    if not index_signers({key_id(public): public}, root):
        raise EntryError(_NOT_A_SIGNER.format(kid=key_id(public)))
    path = root / INDEX_FILE
    sequence, store = _carried(root)
    body = {"kind": KIND, "files": dict(sorted(files.items())), "sequence": sequence}
    signed = sign_entry({**body, "store": store}, key)
    atomic_write(path, json.dumps(signed, indent=1, sort_keys=True) + "\n")
    return path


def check_index(root: Path, index: SignedIndex) -> list[tuple[Path, str]]:
    """(path, problem) for every covered file ``index`` (read from ``root``) does not list
    or lists with another digest, and every listed file that is gone."""
    listed = index.files
    problems = []
    present = {_name(root, p): p for p in indexed_files(root)}
    for name, path in present.items():
        if name not in listed:
            problems.append((path, "not in the store's signed index: added after it was signed"))
            continue
        try:
            digest = file_digest(path)
        except ValueError as exc:
            problems.append((path, f"not JSON: {exc}"))
            continue
        if digest != listed[name]:
            problems.append((path, "edited: not the content the store's signed index lists"))
    for name in sorted(listed.keys() - present.keys()):
        problems.append((root / name, "deleted: the store's signed index lists it"))
    return problems


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    """One index update at a time per store (suite workers may share a store): an exclusive
    ``flock`` on the store directory, waited for."""
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # drops the lock


def update_index(
    root: Path,
    key: Ed25519PrivateKey,
    keys: dict[str, Ed25519PublicKey],
    written: Iterable[Path] = (),
    removed: Iterable[Path] = (),
) -> Path:
    """List the files just ``written`` (their current digests), drop the ``removed`` ones,
    keep every other listing as signed, and re-sign with ``key``. A store without an index
    gets one listing only what was written; an index that does not verify with ``keys`` is
    an error, never silently replaced; so is ``key`` when it may not sign this store's
    index (:func:`write_index`)."""
    with _locked(root):
        files = read_index(root, keys).files if (root / INDEX_FILE).exists() else {}
        for path in removed:
            files.pop(_name(root, path), None)
        for path in written:
            files[_name(root, path)] = file_digest(path)
        return write_index(root, files, key)
