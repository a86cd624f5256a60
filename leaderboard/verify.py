"""``leaderboard verify``: every entry's schema, integrity, place, ε from its ledgers, canary
audit, split hash and signature; every kept record against the entry built from it; the
store's signed index; every version's stored definition against its name. ``leaderboard
sign`` for entries written before the harness signed them, ``leaderboard index`` to (re)build
the signed index."""

from __future__ import annotations

import json
import math
from collections.abc import Collection
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from benchmark.privacy.accountants import epsilon_from_ledger, group_epsilons
from benchmark.privacy.ledger import UNCHARGED, PrivacyLedger
from leaderboard.entries import (
    build_entry,
    content_digest,
    integrity_digest,
    publication_refusal,
    version_of,
)
from leaderboard.index_freshness import VerifiedIndexes
from leaderboard.schema import EntryError
from leaderboard.selection import check_report
from leaderboard.signing import accepted_keys, check_signature, verified_body
from leaderboard.store import (
    VERSION_FILE,
    entry_files,
    entry_path,
    read_entry,
    record_files,
    tuning_files,
    tuning_path,
)
from leaderboard.store_index import (
    INDEX_FILE,
    check_index,
    file_digest,
    indexed_files,
    read_index,
    write_index,
)

MALFORMED = (EntryError, ValueError, KeyError, TypeError, AttributeError)

# Leaderboard versions taken out of the published store, and why. A store that holds one
# (an older snapshot of the repository's, a mirror, a bundle) does not verify: its signed
# index, made before the withdrawal, would vouch for it otherwise.
WITHDRAWN = {
    "lb-d1359605ab": "paper 001 v1, withdrawn at commit 4968885: no canary audit",
}

EPSILON_TOLERANCE = 1e-6


def _eps(value: float | str) -> float:
    return math.inf if value == "inf" else float(value)


def _matches(claimed: float, recomputed: float) -> bool:
    """A claimed ε agrees with the recomputed one (exactly, for ∞; else to the tolerance)."""
    return recomputed == claimed or abs(recomputed - claimed) <= EPSILON_TOLERANCE * max(1, claimed)


def _checked_group_epsilons(privacy: dict[str, Any], ledgers: list[Any]) -> float:
    """Check each claimed group ε against the worst over the ledgers of that group's ε;
    return the worst group's ε (the entry's ε), computed once from the same numbers."""
    try:
        per_ledger = [
            group_epsilons(releases, privacy["delta"], privacy["accountant"])
            for releases in ledgers
        ]
    except ValueError as exc:
        raise EntryError(f"group_epsilons: {exc}") from exc
    claimed = {g: _eps(e) for g, e in privacy["group_epsilons"].items()}
    if any(set(groups) != set(claimed) for groups in per_ledger):
        raise EntryError(f"group_epsilons names {sorted(claimed)}, not the ledgers' groups")
    for group, eps in claimed.items():
        recomputed = max(groups[group] for groups in per_ledger)
        if not _matches(eps, recomputed):
            raise EntryError(f"group {group!r}: epsilon {eps} is not the ledgers' {recomputed:.6f}")
    return max(max(groups.values(), default=0.0) for groups in per_ledger)


def check_entry(entry: dict[str, Any], split_hashes: dict[str, str] | None = None) -> None:
    """Raise :class:`EntryError` naming the first inconsistency of a (schema-valid) entry."""
    privacy = entry["privacy"]
    ledgers = [PrivacyLedger.from_json(ledger).releases for ledger in privacy["ledgers"]]
    uncharged = any(r.mechanism == UNCHARGED for releases in ledgers for r in releases)
    if uncharged and privacy["guarantee"] != "simulated":
        raise EntryError("an uncharged release makes the guarantee simulated, not formal")
    if "group_epsilons" in privacy:
        recomputed = _checked_group_epsilons(privacy, ledgers)
    else:
        recomputed = max(
            epsilon_from_ledger(releases, privacy["delta"], privacy["accountant"])
            for releases in ledgers
        )
    claimed, budget = _eps(privacy["epsilon"]), _eps(privacy["epsilon_budget"])
    if not _matches(claimed, recomputed):
        raise EntryError(
            f"epsilon {claimed} does not match {recomputed:.6f} recomputed from the stored ledgers"
        )
    if recomputed > budget + EPSILON_TOLERANCE:
        raise EntryError(f"epsilon {recomputed:.6f} exceeds the entry's budget {budget}")
    refuted = publication_refusal(entry)
    if refuted:
        raise EntryError(refuted)
    digests = entry.get("run_digests")
    if digests is not None and len(digests) != len(entry["runs"]):
        raise EntryError(f"{len(digests)} run_digests for {len(entry['runs'])} runs")
    split = entry["split"]
    if split_hashes is not None:
        expected = split_hashes.get(split["version"])
        if expected is None:
            raise EntryError(f"no manifest for split {split['name']}@{split['version']}")
        if expected != split["content_hash"]:
            raise EntryError(
                f"split {split['name']}@{split['version']}: manifest hash {expected} != "
                f"entry's {split['content_hash']}"
            )


def _check_stored(
    root: Path, path: Path, entry: dict[str, Any], split_hashes: dict[str, str] | None
) -> None:
    """Every check of a stored entry but its digest and signature: its place, its ε from
    the ledgers, its split."""
    if entry_path(root, entry) != path:  # a copy under another name would be a second row
        raise EntryError(
            f"stored at the wrong place: its content belongs at "
            f"{entry_path(root, entry).relative_to(root)}"
        )
    check_entry(entry, split_hashes)


def verify_tree(
    root: Path,
    split_hashes: dict[str, str] | None = None,
    *,
    allow_unsigned: bool = False,
    trusted: Collection[str] | None = None,
    trust_host: bool = False,
    index: bool = True,
    seen: Path | None = None,
) -> list[tuple[Path, str]]:
    """(path, problem) for every entry, kept run record, tuning report, version definition,
    keyring file or signed-index discrepancy under ``root``; empty when all pass. Signatures
    count only by an accepted key (:func:`leaderboard.signing.accepted_keys`: the
    repository's key list, or ``trusted``, plus this host's with ``trust_host``); entries
    may be unsigned with ``allow_unsigned``, which also accepts a store without a signed
    index (nothing anchors it then). ``index=False`` skips the index (to rebuild it).
    With ``seen`` (this machine's memory of verified indexes,
    :mod:`leaderboard.index_freshness`), an index older than one verified before is a
    problem too, and a store that passes is remembered."""
    problems = [
        (root / v, f"withdrawn: {why}") for v, why in WITHDRAWN.items() if (root / v).exists()
    ]
    for path in root.glob(f"lb-*/{VERSION_FILE}"):
        definition = {k: v for k, v in json.loads(path.read_text()).items() if k != "started"}
        name = version_of(definition)
        if name != path.parent.name:
            problems.append((path, f"the version definition hashes to {name}"))
    keys, refused = accepted_keys(root, trusted=trusted, trust_host=trust_host)
    problems += refused
    records: dict[str, dict[str, Any]] = {}
    kept_at: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}  # (version, split) → records
    for path in record_files(root):
        try:
            record = verified_body(json.loads(path.read_text()), keys)
            refuted = publication_refusal(record)
            if refuted:
                raise EntryError(refuted)
            records[record["run_key"]] = record
            place = (path.parents[2].name, path.parents[1].name)
            kept_at.setdefault(place, {})[record["run_key"]] = record
        except MALFORMED as exc:
            problems.append((path, f"run record: {exc}"))
    for path in tuning_files(root):
        try:
            report = verified_body(json.loads(path.read_text()), keys)
            if tuning_path(root, report) != path:  # a copy filed under another cell
                raise ValueError("stored at the wrong place for its cell")
            place = (report["leaderboard_version"], report["split"])
            check_report(report, kept_at.get(place, {}))
        except MALFORMED as exc:
            problems.append((path, f"tuning report: {exc}"))
    for path in entry_files(root):
        try:
            entry = read_entry(path)
            if not (allow_unsigned and "signature" not in entry):
                check_signature(entry, keys)  # before the accounting: a forgery costs nothing
            _check_stored(root, path, entry, split_hashes)
            _check_aggregate(entry, records)
        except MALFORMED as exc:
            problems.append((path, str(exc)))
    if index and not (allow_unsigned and not (root / INDEX_FILE).exists()):
        try:
            signed_index = read_index(root, keys)
        except EntryError as exc:
            problems.append((root / INDEX_FILE, f"signed index: {exc}"))
        else:
            problems += check_index(root, signed_index)
            if seen is not None:
                memory = VerifiedIndexes.read(seen)
                problems += memory.problems(root, signed_index)
                if not problems:
                    memory.remember(signed_index)
    return problems


def _check_aggregate(entry: dict[str, Any], records: dict[str, dict[str, Any]]) -> None:
    """Each kept record of the entry's runs must be the one the entry was built from (its
    digest), and an entry whose runs' records are all kept must be exactly their aggregate
    (entries from before the store kept records have none to compare; entries from before
    entries listed their records' digests are compared without them)."""
    digests = entry.get("run_digests", [None] * len(entry["runs"]))
    for run, digest in zip(entry["runs"], digests, strict=True):
        if digest and run in records and content_digest(records[run]) != digest:
            raise EntryError(f"kept record {run} is not the one this entry was built from")
    if not all(run in records for run in entry["runs"]):
        return
    control = entry["method"].get("role") == "control" and "variant" in entry
    rebuilt = build_entry(
        [records[run] for run in entry["runs"]],
        entry["leaderboard_version"],
        entry.get("variant"),
        control,
    )
    if "run_digests" not in entry:
        del rebuilt["run_digests"]
        rebuilt["integrity"] = integrity_digest(rebuilt)
    if rebuilt["integrity"] != entry["integrity"]:
        raise EntryError("not the aggregate of its stored run records")


def index_store(
    root: Path, key: Ed25519PrivateKey, split_hashes: dict[str, str] | None = None
) -> tuple[dict[str, list[str]], list[tuple[Path, str]]]:
    """Rebuild the store's signed index over every covered file, signed with ``key`` (this
    host's), once every file passes every other check with this host's key trusted beside
    the repository's; otherwise nothing is written. Returns what changed against the old
    index (``added``, ``removed``, ``changed``: the operator reviews them) and the problems.
    For a store that has no index yet, or after a deliberate change the publish path did
    not make (a deleted entry): it vouches for the store as it is now."""
    problems = verify_tree(root, split_hashes, trust_host=True, index=False)
    if problems:
        return {}, problems
    keys, _ = accepted_keys(root, trust_host=True)
    try:
        old = read_index(root, keys).files if (root / INDEX_FILE).exists() else {}
    except EntryError:
        old = {}  # an index no accepted key signed: replaced whole, every file shows as added
    files = {path.relative_to(root).as_posix(): path for path in indexed_files(root)}
    new = {name: file_digest(path) for name, path in files.items()}
    write_index(root, new, key)
    changes = {
        "added": sorted(new.keys() - old.keys()),
        "removed": sorted(old.keys() - new.keys()),
        "changed": sorted(n for n in new.keys() & old.keys() if new[n] != old[n]),
    }
    return changes, []
