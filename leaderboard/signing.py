"""Entry signatures: anchor each leaderboard entry to a key that only the harness host holds.

The ``integrity`` digest catches accidental edits, but anyone can recompute it: the function
is in this repository. An Ed25519 signature over the entry cannot be recomputed without the
private key, which lives outside the repository and the results store
(``$FEDSYNTH_SIGNING_KEY``, else ``~/.config/fedsynth/signing-key.pem``, created 0600). Its
public half is exported into the store as ``_keys/<key-id>.pub`` and committed with the
entries, so anyone can verify without the private key, and adding a key shows up in review
as a new file.

Which keys count: by default only the repository's key list (``results/_keys/`` of this
checkout), whatever store is checked, so a store that brings its own key file (a submission
bundle, a copy, ``my-results``) vouches for nothing by it; naming a key (``--trust``) or this
host's own key (``--trust-host``) is an explicit opt-in (:func:`accepted_keys`).

Which keys may sign the published store's index (the list of which files exist): only
those ``results/_keys/index_signers.json`` names, the maintainers' (:func:`index_signers`).
A key listed for its entries alone (an earlier host's, whose private half is lost; a
submitter's accepted key) vouches for the files the index pins and cannot add, drop or
replace one there.

A valid signature proves the entry was written, unchanged since, by a host holding an
accepted key. It does not prove that host ran honest code: see "Record integrity" in
docs/architecture.md. Nothing whose canary audit refutes its ε is ever signed
(:func:`sign_entry`).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Collection
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from leaderboard.entries import PublicationRefused, publication_refusal
from leaderboard.schema import EntryError

ALGORITHM = "ed25519"
KEY_ENV = "FEDSYNTH_SIGNING_KEY"
DEFAULT_KEY = Path("~/.config/fedsynth/signing-key.pem")
KEYS_DIR = "_keys"
INDEX_SIGNERS = "index_signers.json"  # in the repository's KEYS_DIR: ids that may sign an index
# Domain separation: a signature made for an entry is never valid for anything else.
_CONTEXT = b"fedsynth leaderboard entry v1\n"
_REPOSITORY = Path(__file__).resolve().parent.parent
# The published store of this checkout: its _keys/ is the repository's key list.
REPOSITORY_STORE = _REPOSITORY / "results"


class SigningKeyError(ValueError):
    """The host's signing key cannot be used (misplaced, readable by others, unreadable)."""


def key_path() -> Path:
    return Path(os.environ.get(KEY_ENV) or DEFAULT_KEY).expanduser().resolve()


def key_id(public_key: Ed25519PublicKey) -> str:
    """Short sha256 of the raw public key: names the key in entries and in ``_keys/``."""
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def host_key(store: Path) -> Ed25519PrivateKey:
    """The host's private key (created on first use), its public half exported into ``store``.

    Refuses a key path inside the store or the harness's source tree: either would put the
    private key where it gets committed (or read by anyone holding a checkout).
    """
    path = key_path()
    for place in (store.resolve(), _REPOSITORY):
        if path.is_relative_to(place):
            raise SigningKeyError(
                f"the signing key {path} is inside {place}; keep it outside the repository "
                f"and the results store (set {KEY_ENV})"
            )
    key = _load_key(path) if path.exists() else _create_key(path)
    export_public_key(store, key.public_key())
    return key


def _create_key(path: Path) -> Ed25519PrivateKey:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    try:  # created 0600 in one step: never readable by others, not even briefly
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another harness process created it first
        return _load_key(path)
    with os.fdopen(fd, "wb") as out:
        out.write(pem)
    return key


def _load_key(path: Path) -> Ed25519PrivateKey:
    if path.stat().st_mode & 0o077:
        raise SigningKeyError(f"the signing key {path} is readable by others: chmod 600 it")
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except ValueError as exc:
        raise SigningKeyError(f"{path} is not a PEM private key: {exc}") from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise SigningKeyError(f"{path} is not an Ed25519 key")
    return key


def public_key_path(store: Path, kid: str) -> Path:
    return store / KEYS_DIR / f"{kid}.pub"


def export_public_key(store: Path, public_key: Ed25519PublicKey) -> Path:
    """Write ``_keys/<key-id>.pub`` once (an existing file is left as it is)."""
    path = public_key_path(store, key_id(public_key))
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(
            public_key.public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
    return path


def key_files(store: Path) -> list[Path]:
    return sorted((store / KEYS_DIR).glob("*.pub"))


def load_public_key(path: Path) -> Ed25519PublicKey:
    """One keyring file; refused when its name is not its key's id, since otherwise replacing
    a key's file would silently swap the key that verifies its entries."""
    try:
        public_key = serialization.load_pem_public_key(path.read_bytes())
    except ValueError as exc:
        raise EntryError(f"not a PEM public key: {exc}") from exc
    if not isinstance(public_key, Ed25519PublicKey):
        raise EntryError("not an Ed25519 public key")
    if key_id(public_key) != path.stem:
        raise EntryError(f"holds key {key_id(public_key)}, not {path.stem}")
    return public_key


def keyring(store: Path) -> tuple[dict[str, Ed25519PublicKey], list[tuple[Path, str]]]:
    """The store's public keys by id, and (path, problem) for each keyring file refused."""
    keys, problems = {}, []
    for path in key_files(store):
        try:
            keys[path.stem] = load_public_key(path)
        except EntryError as exc:
            problems.append((path, str(exc)))
    return keys, problems


def host_public_key() -> Ed25519PublicKey:
    """This host's public key, from its private key file; never creates one (a check that
    trusts this host's key must not make up a key that signed nothing)."""
    path = key_path()
    if not path.exists():
        raise SigningKeyError(f"no signing key at {path}: this host has signed nothing")
    return _load_key(path).public_key()


def accepted_keys(
    store: Path, *, trusted: Collection[str] | None = None, trust_host: bool = False
) -> tuple[dict[str, Ed25519PublicKey], list[tuple[Path, str]]]:
    """The keys whose signatures count in ``store``, and (path, problem) for each keyring
    file refused (the repository's and ``store``'s own).

    By default the repository's key list only: a key file that a store brings along (a
    submission bundle unpacked, a copy with a key added) is not trusted because it is
    there. ``trusted``: exactly these key ids instead, each looked up in the repository's
    list or ``store``'s own ``_keys/`` (naming a key is the opt-in to a key the repository
    does not list). ``trust_host``: this host's own key as well (your runs in
    ``my-results``, signed by the key the CLI signs with).
    """
    repository, problems = keyring(REPOSITORY_STORE)
    own, refused = keyring(store)
    if store.resolve() != REPOSITORY_STORE.resolve():
        problems += refused
    if trusted is None:
        keys = dict(repository)
    else:
        known = {**own, **repository}
        unknown = sorted(set(trusted) - set(known))
        if unknown:
            problems.append(
                (store / KEYS_DIR, f"trusted key {', '.join(unknown)} is in no key list")
            )
        keys = {kid: known[kid] for kid in trusted if kid in known}
    if trust_host:
        public = host_public_key()
        keys[key_id(public)] = public
    return keys, problems


def index_signers(keys: dict[str, Ed25519PublicKey], store: Path) -> dict[str, Ed25519PublicKey]:
    """The keys of ``keys`` that may sign ``store``'s index. On the repository's own store
    (the published leaderboard), only the keys its ``index_signers.json`` names (none when
    there is no such file); on any other store (``my-results``, a bundle, a copy), every key
    the reader accepts, since which keys those are was the reader's choice."""
    if store.resolve() != REPOSITORY_STORE.resolve():
        return dict(keys)
    path = REPOSITORY_STORE / KEYS_DIR / INDEX_SIGNERS
    named = set(json.loads(path.read_text())) if path.exists() else set()
    return {kid: k for kid, k in keys.items() if kid in named}


def verified_body(signed: dict[str, Any], keys: dict[str, Ed25519PublicKey]) -> dict[str, Any]:
    """``signed`` without its signature, once :func:`check_signature` accepts it."""
    check_signature(signed, keys)
    return {k: v for k, v in signed.items() if k != "signature"}


def _signed_bytes(entry: dict[str, Any]) -> bytes:
    body = {k: v for k, v in entry.items() if k != "signature"}
    return _CONTEXT + json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def sign_entry(entry: dict[str, Any], key: Ed25519PrivateKey) -> dict[str, Any]:
    """The entry with a signature over everything else in it (its integrity digest included).

    Refuses (:class:`PublicationRefused`) a record or entry that
    :func:`~leaderboard.entries.publication_refusal` refuses (a canary audit that refutes
    its ε; an untrusted method off the public schedule): every signature the harness makes
    goes through here, so none vouches for such a release."""
    refuted = publication_refusal(entry)
    if refuted:
        raise PublicationRefused(f"{entry.get('run_key') or entry.get('entry_key')}: {refuted}")
    value = key.sign(_signed_bytes(entry)).hex()
    kid = key_id(key.public_key())
    return {**entry, "signature": {"key_id": kid, "algorithm": ALGORITHM, "value": value}}


def check_signature(entry: dict[str, Any], keys: dict[str, Ed25519PublicKey]) -> str:
    """The id of the key that signed ``entry``; :class:`EntryError` if it is unsigned, signed
    by a key outside ``keys``, or changed since it was signed."""
    signature = entry.get("signature")
    if signature is None:
        raise EntryError("unsigned: nothing anchors this entry to the harness host")
    kid = signature["key_id"]
    if kid not in keys:
        accepted = ", ".join(sorted(keys)) or "none"
        raise EntryError(f"signed by key {kid}, which is not an accepted key ({accepted})")
    try:
        keys[kid].verify(bytes.fromhex(signature["value"]), _signed_bytes(entry))
    except (InvalidSignature, ValueError, TypeError) as exc:  # not hex: no signature either
        raise EntryError(
            f"the signature by key {kid} does not verify: the entry was changed after it was signed"
        ) from exc
    return kid
