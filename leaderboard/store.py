"""The results store: JSON entries under ``results/<leaderboard-version>/<split>/`` are the
source of truth; an SQLite index is rebuilt from them on demand for queries."""

from __future__ import annotations

import json
import math
import os
import sqlite3
from dataclasses import dataclass, replace
from datetime import UTC
from pathlib import Path
from typing import Any

from benchmark.files import atomic_write
from benchmark.registry import UnsafePathError, path_under, valid_name
from leaderboard.entries import integrity_digest
from leaderboard.schema import EntryError, validate_entry
from leaderboard.selection import grid_digest

INDEX_NAME = ".index.sqlite"


def entry_path(root: Path, entry: dict[str, Any]) -> Path:
    """Where ``entry`` lives under ``root``. Its names come from the entry (a submission's,
    possibly), so the method name must be a registrable name and each path part a plain
    file name that stays under ``root``; otherwise :class:`EntryError` names the field."""
    method = entry["method"]["name"]
    if not valid_name(method):
        raise EntryError(f"method.name: {method!r} is not a valid method name")
    try:
        version = path_under(root, entry["leaderboard_version"], where="leaderboard_version")
        split = path_under(version, entry["split"]["name"], where="split.name")
        return path_under(split, f"{entry['entry_key']}.json", where="entry_key")
    except UnsafePathError as exc:
        raise EntryError(str(exc)) from exc


def write_entry(root: Path, entry: dict[str, Any]) -> Path:
    """Validate, then write atomically."""
    validate_entry(entry)
    path = entry_path(root, entry)
    atomic_write(path, json.dumps(entry, indent=1, sort_keys=True) + "\n")
    return path


def superseded_entries(root: Path, entry: dict[str, Any]) -> list[Path]:
    """The other entries of ``entry``'s cell under ``root``: the same version, split,
    method, ε, privacy unit and profile (the readable part of the entry key) from another
    resolved spec (the key's last part, the spec's digest), e.g. before a tuned parameter
    was adopted. A table shows one row per cell, so they are what ``entry`` replaces; a
    paper's named rows (``variant``) are cells of their own."""
    path = entry_path(root, entry)
    cell = entry["entry_key"].rpartition("__")[0]
    return sorted(
        p
        for p in path.parent.glob("*.json")
        if p != path
        and p.stem.rpartition("__")[0] == cell
        and json.loads(p.read_text()).get("variant") == entry.get("variant")
    )


def read_entry(path: Path) -> dict[str, Any]:
    """Read and validate one entry (schema and integrity digest)."""
    try:
        entry = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise EntryError(f"{path}: not valid JSON: {exc}") from exc
    try:
        validate_entry(entry)
    except EntryError as exc:
        raise EntryError(f"{path}: {exc}") from exc
    if integrity_digest(entry) != entry["integrity"]:
        raise EntryError(
            f"{path}: integrity digest mismatch: the entry was edited after it was written"
        )
    return entry


MANIFESTS_DIR = "_manifests"
RECORDS_DIR = "_records"


def entry_files(root: Path) -> list[Path]:
    return sorted(p for p in root.glob("lb-*/*/*.json") if p.parent.name != MANIFESTS_DIR)


def _records_dir(root: Path, lb_version: str, split_name: str) -> Path:
    version = path_under(root, lb_version, where="leaderboard_version")
    return path_under(version, split_name, where="split.name") / RECORDS_DIR


def record_path(root: Path, lb_version: str, split_name: str, run_key: str) -> Path:
    """``<version>/<split>/_records/<run key>.json``: one run's record, beside its entry."""
    records = _records_dir(root, lb_version, split_name)
    return path_under(records, f"{run_key}.json", where="run key")


def write_record(root: Path, lb_version: str, split_name: str, record: dict[str, Any]) -> Path:
    """Keep one run's (signed) record in the store, so that a grid's entries can be rebuilt
    from it on another machine, after the run directory that produced it is gone."""
    path = record_path(root, lb_version, split_name, record["run_key"])
    atomic_write(path, json.dumps(record, indent=1, sort_keys=True) + "\n")
    return path


def record_files(root: Path) -> list[Path]:
    """Every version's and split's kept run records."""
    return sorted(root.glob(f"lb-*/*/{RECORDS_DIR}/*.json"))


TUNING_DIR = "_tuning"


def tuning_path(root: Path, report: dict[str, Any]) -> Path:
    """``<version>/<split>/_tuning/<method>__eps<ε>__seed<seed>__<digest>.json``: where one
    hyperparameter selection (:mod:`leaderboard.tuning`) lives, beside the kept records of
    its candidate runs; the digest names what it compared (grid and metric)."""
    if not valid_name(report["method"]):
        raise EntryError(f"method: {report['method']!r} is not a valid method name")
    version = path_under(root, report["leaderboard_version"], where="leaderboard_version")
    tuning = path_under(version, report["split"], where="split") / TUNING_DIR
    eps = report["epsilon"]
    label = eps if isinstance(eps, str) else f"{eps:g}"
    digest = grid_digest(report["grid"], report["select"])
    name = f"{report['method']}__eps{label}__seed{report['seed']}__{digest}.json"
    return path_under(tuning, name, where="tuning report")


def write_tuning(root: Path, report: dict[str, Any]) -> Path:
    path = tuning_path(root, report)
    atomic_write(path, json.dumps(report, indent=1, sort_keys=True) + "\n")
    return path


def tuning_files(root: Path) -> list[Path]:
    """Every version's and split's tuning reports."""
    return sorted(root.glob(f"lb-*/*/{TUNING_DIR}/*.json"))


def stored_records(root: Path, lb_version: str, split_name: str) -> list[dict[str, Any]]:
    """The run records kept for ``split_name`` under ``lb_version`` (unchecked: the caller
    checks their signatures)."""
    records = _records_dir(root, lb_version, split_name)
    return [json.loads(p.read_text()) for p in sorted(records.glob("*.json"))]


def write_manifest(root: Path, lb_version: str, name: str, manifest: dict[str, Any]) -> Path:
    """Keep the split manifest beside the entries so verification needs no split data.

    A manifest the store already keeps that differs only in when the split was fetched and
    built (:data:`BUILD_TIMES`: another host's rebuild of the same split) is left as it is,
    so a rebuild does not rewrite the published file."""
    manifests = path_under(root, lb_version, where="leaderboard_version") / MANIFESTS_DIR
    path = path_under(manifests, f"{name}@{manifest['version']}.json", where="split manifest")
    if path.is_file() and _without_times(_read(path)) == _without_times(manifest):
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return path


BUILD_TIMES = ("fetched_at", "built_at")  # provenance, not hashed (benchmark.split_manifest)


def _without_times(manifest: Any) -> Any:
    if not isinstance(manifest, dict):
        return manifest
    return {k: v for k, v in manifest.items() if k not in BUILD_TIMES}


def _read(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def manifest_hashes(root: Path) -> dict[str, str]:
    """Split version → content hash, from every stored manifest."""
    hashes = {}
    for path in root.glob(f"lb-*/{MANIFESTS_DIR}/*.json"):
        manifest = json.loads(path.read_text())
        hashes[manifest["version"]] = manifest["content_hash"]
    return hashes


VERSION_FILE = "_version.json"


def write_version(root: Path, definition: dict[str, Any]) -> str:
    """Describe a version once (its definition and when it was started); returns its name."""
    from datetime import datetime

    from leaderboard.entries import version_of

    name = version_of(definition)
    path = root / name / VERSION_FILE
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        started = datetime.now(UTC).isoformat(timespec="seconds")
        path.write_text(json.dumps({**definition, "started": started}, indent=1) + "\n")
    return name


def versions(root: Path) -> list[str]:
    """Leaderboard versions, oldest first (by when each was started; undescribed ones,
    from before versions were described, count as oldest)."""

    def started(directory: Path) -> str:
        path = directory / VERSION_FILE
        return json.loads(path.read_text())["started"] if path.exists() else ""

    dirs = [p for p in root.glob("lb-*") if p.is_dir()]
    return [p.name for p in sorted(dirs, key=lambda p: (started(p), p.name))]


@dataclass(frozen=True)
class Row:
    """One indexed entry: the columns tables filter and sort on, plus the entry itself.

    ``path`` is relative to the store root; ``store`` labels rows read from a store other
    than the primary one (e.g. ``yours`` for a user's own runs beside the published ones).
    """

    leaderboard_version: str
    split: str
    method: str
    epsilon: float
    epsilon_budget: float
    guarantee: str
    path: str
    entry: dict[str, Any]
    store: str = ""


def labelled(rows: list[Row], label: str) -> list[Row]:
    """Rows of a secondary store, their method shown as ``name (label)``."""
    return [replace(r, method=f"{r.method} ({label})", store=label) for r in rows]


def row_name(entry: dict[str, Any]) -> str:
    """The table row an entry is: its paper's variant name, else its method's name."""
    return entry.get("variant") or entry["method"]["name"]


def _eps(value: float | str) -> float:
    return math.inf if value == "inf" else float(value)


def rebuild_index(root: Path) -> Path:
    """Recreate the SQLite index from the JSON entries (invalid entries are refused)."""
    db_path = root / INDEX_NAME
    tmp = root / (INDEX_NAME + ".tmp")
    tmp.unlink(missing_ok=True)
    with sqlite3.connect(tmp) as db:
        db.execute(
            "CREATE TABLE entries (leaderboard_version TEXT, split TEXT, method TEXT, "
            "epsilon REAL, epsilon_budget REAL, guarantee TEXT, path TEXT PRIMARY KEY, json TEXT)"
        )
        for path in entry_files(root):
            entry = read_entry(path)
            db.execute(
                "INSERT INTO entries VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    entry["leaderboard_version"],
                    entry["split"]["name"],
                    row_name(entry),
                    _eps(entry["privacy"]["epsilon"]),
                    _eps(entry["privacy"]["epsilon_budget"]),
                    entry["privacy"]["guarantee"],
                    str(path.relative_to(root)),
                    json.dumps(entry),
                ),
            )
    os.replace(tmp, db_path)
    return db_path


def query(
    root: Path,
    *,
    version: str | None = None,
    split: str | None = None,
    epsilon_budget: float | None = None,
) -> list[Row]:
    """Entries of one leaderboard version (default: the newest), optionally filtered."""
    db_path = rebuild_index(root)
    version = version or (versions(root) or [None])[-1]
    sql, args = "SELECT * FROM entries WHERE leaderboard_version = ?", [version]
    if split:
        sql, args = sql + " AND split = ?", [*args, split]
    rows = _select(db_path, sql, args)
    if epsilon_budget is not None:
        rows = [r for r in rows if r.epsilon_budget in (epsilon_budget, 0.0, math.inf)]
    return rows


def query_with(
    root: Path, others: dict[str, Path], *, version: str | None = None, **filters: Any
) -> list[Row]:
    """``query(root)`` plus the same version's rows of each other store, labelled."""
    rows = query(root, version=version, **filters) if root.exists() else []
    version = version or (rows[0].leaderboard_version if rows else None)
    for label, other in others.items():
        if other.exists() and other.resolve() != root.resolve() and entry_files(other):
            other_version = version or (versions(other) or [None])[-1]
            rows += labelled(query(other, version=other_version, **filters), label)
            version = other_version
    return rows


def rows_by_version(root: Path) -> dict[str, list[Row]]:
    """Every entry, grouped by leaderboard version (oldest first), from one index rebuild."""
    rows = _select(rebuild_index(root), "SELECT * FROM entries", [])
    return {v: [r for r in rows if r.leaderboard_version == v] for v in versions(root)}


def _select(db_path: Path, sql: str, args: list[Any]) -> list[Row]:
    with sqlite3.connect(db_path) as db:
        return [
            Row(v, s, m, e, b, g, p, json.loads(j))
            for v, s, m, e, b, g, p, j in db.execute(sql + " ORDER BY split, method, epsilon", args)
        ]
