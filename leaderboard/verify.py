"""``leaderboard verify``: every entry's schema, integrity, place, ε from its ledgers, split
hash and signature; every version's stored definition against its name; ``leaderboard sign``
for entries written before the harness signed them."""

from __future__ import annotations

import json
import math
from collections.abc import Collection
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from benchmark.privacy.accountants import epsilon_from_ledger, group_epsilons
from benchmark.privacy.ledger import UNCHARGED, PrivacyLedger
from leaderboard.entries import build_entry, version_of
from leaderboard.schema import EntryError
from leaderboard.selection import check_report
from leaderboard.signing import check_signature, keyring, sign_entry, verified_body
from leaderboard.store import (
    VERSION_FILE,
    entry_files,
    entry_path,
    read_entry,
    record_files,
    tuning_files,
    tuning_path,
    write_entry,
)

MALFORMED = (EntryError, ValueError, KeyError, TypeError, AttributeError)

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


def _check_stored(root: Path, path: Path, split_hashes: dict[str, str] | None) -> dict[str, Any]:
    """Read one stored entry and run every check but its signature; returns it."""
    entry = read_entry(path)
    if entry_path(root, entry) != path:  # a copy under another name would be a second row
        raise EntryError(
            f"stored at the wrong place: its content belongs at "
            f"{entry_path(root, entry).relative_to(root)}"
        )
    check_entry(entry, split_hashes)
    return entry


def verify_tree(
    root: Path,
    split_hashes: dict[str, str] | None = None,
    *,
    allow_unsigned: bool = False,
    trusted: Collection[str] | None = None,
) -> list[tuple[Path, str]]:
    """(path, problem) for every entry, kept run record, tuning report, version definition or
    keyring file under ``root`` that fails; empty when all pass. Entries must be signed by a
    key of the store's keyring (only those in ``trusted`` when given) unless
    ``allow_unsigned``."""
    problems = []
    for path in root.glob(f"lb-*/{VERSION_FILE}"):
        definition = {k: v for k, v in json.loads(path.read_text()).items() if k != "started"}
        name = version_of(definition)
        if name != path.parent.name:
            problems.append((path, f"the version definition hashes to {name}"))
    keys, refused = keyring(root)
    problems += refused
    if trusted is not None:
        keys = {kid: key for kid, key in keys.items() if kid in trusted}
    records: dict[str, dict[str, Any]] = {}
    kept_at: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}  # (version, split) → records
    for path in record_files(root):
        try:
            record = verified_body(json.loads(path.read_text()), keys)
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
            entry = _check_stored(root, path, split_hashes)
            if not (allow_unsigned and "signature" not in entry):
                check_signature(entry, keys)
            _check_aggregate(entry, records)
        except EntryError as exc:
            problems.append((path, str(exc)))
    return problems


def _check_aggregate(entry: dict[str, Any], records: dict[str, dict[str, Any]]) -> None:
    """An entry whose runs' records the store keeps must be exactly their aggregate (entries
    from before the store kept records have none to compare)."""
    if not all(run in records for run in entry["runs"]):
        return
    rebuilt = build_entry([records[run] for run in entry["runs"]], entry["leaderboard_version"])
    if rebuilt["integrity"] != entry["integrity"]:
        raise EntryError("not the aggregate of its stored run records")


def sign_unsigned(
    root: Path, key: Ed25519PrivateKey, split_hashes: dict[str, str] | None = None
) -> tuple[list[Path], list[tuple[Path, str]]]:
    """Sign every unsigned entry that passes all other checks (signed paths, problems).

    For entries written before the harness signed them. An entry that fails a check is left
    unsigned, and a signed one is never re-signed: signing must not launder an edit.
    """
    signed, problems = [], []
    for path in entry_files(root):
        try:
            entry = _check_stored(root, path, split_hashes)
        except EntryError as exc:
            problems.append((path, str(exc)))
            continue
        if "signature" not in entry:
            signed.append(write_entry(root, sign_entry(entry, key)))
    return signed, problems
