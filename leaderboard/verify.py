"""``leaderboard verify``: every entry's schema, integrity, ε from its ledgers, and split hash;
every version's stored definition against its name."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from benchmark.privacy.accountants import epsilon_from_ledger
from benchmark.privacy.ledger import PrivacyLedger
from leaderboard.entries import version_of
from leaderboard.schema import EntryError
from leaderboard.store import VERSION_FILE, entry_files, read_entry

EPSILON_TOLERANCE = 1e-6


def _eps(value: float | str) -> float:
    return math.inf if value == "inf" else float(value)


def check_entry(entry: dict[str, Any], split_hashes: dict[str, str] | None = None) -> None:
    """Raise :class:`EntryError` naming the first inconsistency of a (schema-valid) entry."""
    privacy = entry["privacy"]
    recomputed = max(
        epsilon_from_ledger(
            PrivacyLedger.from_json(ledger).releases, privacy["delta"], privacy["accountant"]
        )
        for ledger in privacy["ledgers"]
    )
    claimed, budget = _eps(privacy["epsilon"]), _eps(privacy["epsilon_budget"])
    if not (
        recomputed == claimed or abs(recomputed - claimed) <= EPSILON_TOLERANCE * max(1, claimed)
    ):
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


def verify_tree(root: Path, split_hashes: dict[str, str] | None = None) -> list[tuple[Path, str]]:
    """(path, problem) for every entry under ``root`` that fails; empty when all pass."""
    problems = []
    for path in root.glob(f"lb-*/{VERSION_FILE}"):
        definition = {k: v for k, v in json.loads(path.read_text()).items() if k != "started"}
        name = version_of(definition)
        if name != path.parent.name:
            problems.append((path, f"the version definition hashes to {name}"))
    for path in entry_files(root):
        try:
            check_entry(read_entry(path), split_hashes)
        except EntryError as exc:
            problems.append((path, str(exc)))
    return problems
