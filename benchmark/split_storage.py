"""On-disk layout of a finished split, written so that nothing half-written looks finished.

A split directory holds::

    data/            Hugging Face DatasetDict (train / validation / test / public)
    clients.json     sidecar: document -> client map and per-client facts (hashed)
    manifest.json    what the split is (see benchmark.split_manifest)
    COMPLETE         written last; only directories with it count as splits

Everything is first written into a hidden sibling ``.<name>.tmp-<random>`` and renamed
into place in one step, so an interrupted build leaves at most a hidden temporary
directory (removed by the next build of the same target), never a split without its
``COMPLETE`` marker.

A split is shared by every run on the host and keyed by its content hash, so
:func:`load_split` recomputes that hash and refuses records edited after the build (one
submission must not change the data another is scored on); :func:`verify` recomputes it
and lists every mismatch (``fedsynth splits verify``).
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmark.data import CLIENT_ID, DATE, LABEL, PARTS, SOURCE_ID, TEXT, FederatedSplit
from benchmark.split_hash import content_hash, sha256, version_of

MANIFEST = "manifest.json"
CLIENTS = "clients.json"
DATA = "data"
COMPLETE = "COMPLETE"
BASE_COLUMNS = (TEXT, CLIENT_ID, DATE, LABEL, SOURCE_ID)
# Fields load_split needs, with their JSON types.
MANIFEST_FIELDS = {"name": str, "version": str, "content_hash": str, "source": dict, "build": dict}


class IncompleteSplitError(FileNotFoundError):
    """The directory is not a finished split (missing, interrupted or not a split at all)."""


class SplitError(ValueError):
    """A finished split whose manifest is malformed or whose files do not match it."""


def is_complete(path: str | Path) -> bool:
    path = Path(path)
    return (path / COMPLETE).is_file() and (path / MANIFEST).is_file()


def check_target(out_dir: str | Path, overwrite: bool) -> None:
    """Refuse early to replace a finished split (unless ``overwrite``) or a foreign directory."""
    out_dir = Path(out_dir)
    if not out_dir.exists():
        return
    if not out_dir.is_dir():
        raise FileExistsError(f"{out_dir} exists and is not a directory")
    if is_complete(out_dir):
        if not overwrite:
            raise FileExistsError(f"{out_dir} already holds a finished split; pass overwrite")
    elif any(out_dir.iterdir()):
        raise FileExistsError(f"{out_dir} is not empty and is not a split; refusing to replace it")


def _features(parts: Mapping[str, list[dict[str, Any]]]):
    """Column types from the first non-null value of each column (strings by default)."""
    from datasets import Features, Value

    kinds = {bool: "bool", int: "int64", float: "float64", str: "string"}
    columns: dict[str, str] = {}
    for rows in parts.values():
        for row in rows:
            for name, value in row.items():
                if value is not None and columns.get(name) is None:
                    columns[name] = kinds[type(value)]
                columns.setdefault(name, None)
    for name in BASE_COLUMNS:
        columns.setdefault(name, "string")
    return Features({name: Value(kind or "string") for name, kind in columns.items()})


def save_split(
    out_dir: str | Path,
    parts: Mapping[str, list[dict[str, Any]]],
    manifest: Mapping[str, Any],
    clients: bytes,
    *,
    overwrite: bool = False,
    progress: bool = False,
) -> Path:
    """Write a split atomically; ``clients`` is the exact sidecar bytes the manifest hashed."""
    from datasets import Dataset, DatasetDict
    from datasets.utils import logging as ds_logging

    out_dir = Path(out_dir)
    check_target(out_dir, overwrite)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    for stale in out_dir.parent.glob(f".{out_dir.name}.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    tmp = out_dir.parent / f".{out_dir.name}.tmp-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        features = _features(parts)
        datasets = DatasetDict(
            {
                part: Dataset.from_dict(
                    {name: [row.get(name) for row in parts.get(part, [])] for name in features},
                    features=features,
                )
                for part in PARTS
            }
        )
        bars_were_on = ds_logging.is_progress_bar_enabled()
        (ds_logging.enable_progress_bar if progress else ds_logging.disable_progress_bar)()
        try:
            # An empty part must still get one (empty) shard, or it cannot be loaded back.
            shards = {part: 1 if len(ds) == 0 else None for part, ds in datasets.items()}
            datasets.save_to_disk(str(tmp / DATA), num_shards=shards)
        finally:
            (ds_logging.enable_progress_bar if bars_were_on else ds_logging.disable_progress_bar)()
        (tmp / CLIENTS).write_bytes(clients)
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        (tmp / COMPLETE).write_text(str(manifest.get("version", "")) + "\n")
        _replace(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir


def _replace(tmp: Path, out_dir: Path) -> None:
    """Move ``tmp`` to ``out_dir``; an old split is moved aside first, then deleted."""
    old = None
    if out_dir.exists():
        old = out_dir.parent / f".{out_dir.name}.old-{uuid.uuid4().hex[:8]}"
        os.replace(out_dir, old)
    os.replace(tmp, out_dir)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def read_manifest(path: str | Path) -> dict[str, Any]:
    """The manifest of a finished split; refuses anything else with a clear message."""
    path = Path(path)
    if not path.is_dir():
        raise IncompleteSplitError(f"{path} does not exist or is not a directory")
    if not is_complete(path):
        raise IncompleteSplitError(
            f"{path} is not a finished split (no {COMPLETE} marker or manifest): the build "
            "was interrupted or this is not a split directory; rebuild it"
        )
    try:
        manifest = json.loads((path / MANIFEST).read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SplitError(f"{path / MANIFEST}: not valid JSON: {exc}") from exc
    if not isinstance(manifest, dict):
        raise SplitError(f"{path / MANIFEST}: expected a JSON object")
    return manifest


def read_clients(path: str | Path) -> dict[str, Any]:
    """The sidecar: ``documents`` (source id -> client) and ``clients`` (part -> client ->
    facts such as ``samples``, ``strong`` and, for label-skewed clients, ``labels``)."""
    read_manifest(path)
    return json.loads((Path(path) / CLIENTS).read_text())


def read_parts(path: str | Path) -> dict[str, list[dict[str, Any]]]:
    """All records of a finished split, part by part, in stored order."""
    from datasets import load_from_disk

    read_manifest(path)
    stored = load_from_disk(str(Path(path) / DATA))
    return {part: stored[part].to_list() if part in stored else [] for part in PARTS}


def load_split(path: str | Path) -> FederatedSplit:
    """Load a finished split into the in-memory container every layer uses, after checking
    that its records still hash to the manifest's content hash."""
    path = Path(path)
    manifest = read_manifest(path)
    for name, kind in MANIFEST_FIELDS.items():
        if not isinstance(manifest.get(name), kind):
            raise SplitError(
                f"{path / MANIFEST}: field {name!r} is missing or not a {kind.__name__}"
            )
    try:
        parts = read_parts(path)
    except Exception as exc:  # any corruption of the stored records, in one line
        reason = " ".join(str(exc).split())
        raise SplitError(f"{path}: cannot read the stored records: {reason}") from exc
    _check_content(path, manifest, parts)
    return FederatedSplit(name=str(manifest["name"]), manifest=manifest, parts=parts)


def _check_content(path: Path, manifest: dict[str, Any], parts: dict[str, list]) -> None:
    """Refuse records (or a client sidecar) that no longer hash to the manifest's key."""
    clients = path / CLIENTS
    clients_sha = sha256(clients.read_bytes()) if clients.is_file() else "missing"
    actual = content_hash(parts, manifest["source"], manifest["build"], clients_sha)
    if actual != manifest["content_hash"] or manifest["version"] != version_of(actual):
        raise SplitError(
            f"{path}: the stored records do not match the manifest's content hash "
            f"{manifest['content_hash'][:12]} (changed after the build); rebuild the split"
        )


def find_splits(root: str | Path) -> Iterator[Path]:
    """Finished splits under ``root`` (not descending into them), in sorted order."""
    root = Path(root)
    if not root.is_dir():
        return
    if is_complete(root):
        yield root
        return
    for child in sorted(root.iterdir()):
        if child.is_dir() and not child.name.startswith("."):
            yield from find_splits(child)


@dataclass
class Verification:
    """Outcome of :func:`verify`; ``ok`` only when every check passed."""

    path: Path
    expected_hash: str
    actual_hash: str
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def verify(path: str | Path) -> Verification:
    """Recompute the sidecar hash and the content hash of a stored split."""
    path = Path(path)
    manifest = read_manifest(path)
    problems: list[str] = []
    sidecar = manifest.get("partition", {}).get("clients_file", {})
    clients_path = path / CLIENTS
    clients_sha = sha256(clients_path.read_bytes()) if clients_path.is_file() else "missing"
    if clients_sha != sidecar.get("sha256"):
        problems.append(f"{CLIENTS} sha256 is {clients_sha}, manifest says {sidecar.get('sha256')}")
    expected = str(manifest.get("content_hash", ""))
    try:
        parts = read_parts(path)
    except Exception as exc:  # any corruption of the stored data is a failed check
        problems.append(f"cannot read the stored records: {exc!r}")
        return Verification(path, expected, "unreadable", problems)
    actual = content_hash(parts, manifest["source"], manifest["build"], clients_sha)
    if actual != expected:
        problems.append(f"content hash is {actual}, manifest says {expected}")
    if manifest.get("version") != version_of(expected):
        problems.append(f"version {manifest.get('version')!r} does not match the content hash")
    for part in PARTS:
        stated = manifest.get("counts", {}).get(part, {}).get("samples")
        if stated != len(parts[part]):
            problems.append(f"{part}: manifest counts {stated} samples, found {len(parts[part])}")
    return Verification(path, expected, actual, problems)
