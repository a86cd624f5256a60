"""Rows of a Hugging Face hub dataset pinned by revision, or of local files in its schema.

Several sources (LargeFedBench's bioRxiv and Congress sets, OASST1, HH-RLHF, TL;DR, the
public prompt sets, c4) are published on the hub. A build names the repository *and a
revision* (a commit SHA, a tag, or ``refs/convert/parquet`` for script datasets), and the
revision goes into the manifest. The same rows can come from local files with the hub
dataset's columns (``.parquet``, ``.jsonl``/``.json`` optionally ``.gz``, ``.csv``), which is
how tests and offline machines use these sources. Local files are read directly (pyarrow,
json, csv: no ``datasets`` import, which pulls in torch); a shuffled stream (c4) always goes
through ``datasets`` so that local shards and the hub are shuffled by the same algorithm.

Hub downloads are cached under the build's cache dir (non-streaming), so an interrupted
build resumes; very large corpora (c4) are streamed instead.
"""

from __future__ import annotations

import bz2
import csv
import glob
import gzip
import hashlib
import itertools
import json
import lzma
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_FORMATS = {
    ".parquet": "parquet",
    ".jsonl": "json",
    ".json": "json",
    ".ndjson": "json",
    ".csv": "csv",
}


class HubError(RuntimeError):
    """A hub dataset (or its local copy) cannot be loaded; the message says how to fix it."""


@dataclass(frozen=True)
class HubDataset:
    """Where rows come from on the hub: repository, pinned revision, config, split, files."""

    repo: str
    revision: str = "main"
    config: str | None = None
    split: str = "train"
    data_files: tuple[str, ...] | None = None
    data_dir: str | None = None
    streaming: bool = False

    def describe(self) -> str:
        parts = [f"{self.repo}@{self.revision}"]
        if self.config:
            parts.append(f"config={self.config}")
        if self.data_dir:
            parts.append(f"data_dir={self.data_dir}")
        parts.append(f"split={self.split}")
        return " ".join(parts)


def expand_files(files: Sequence[str | Path]) -> list[Path]:
    """Local paths, directories (their data files) and globs, expanded and sorted."""
    out: list[Path] = []
    for item in files:
        path = Path(item)
        if path.is_dir():
            out.extend(p for p in sorted(path.rglob("*")) if p.is_file() and _format_of(p))
        elif any(ch in str(item) for ch in "*?["):
            out.extend(Path(p) for p in sorted(glob.glob(str(item), recursive=True)))
        else:
            out.append(path)
    missing = [str(p) for p in out if not p.is_file()]
    if missing:
        raise HubError(f"local data file(s) not found: {', '.join(missing)}")
    if not out:
        raise HubError(f"no data files found in {', '.join(map(str, files))}")
    return out


def _format_of(path: Path) -> str | None:
    name = path.name.lower()
    for compressed in (".gz", ".bz2", ".xz", ".zst"):
        if name.endswith(compressed):
            name = name[: -len(compressed)]
    return _FORMATS.get(Path(name).suffix)


def local_format(files: Sequence[Path]) -> str:
    """The ``datasets`` builder for ``files`` (all must share one format)."""
    formats = {_format_of(p) for p in files}
    if None in formats:
        bad = [str(p) for p in files if _format_of(p) is None]
        raise HubError(
            f"unsupported local file type: {', '.join(bad)} "
            f"(expected {', '.join(sorted(_FORMATS))}, optionally compressed)"
        )
    if len(formats) != 1:
        raise HubError(f"local files mix formats {sorted(formats)}; pass one format at a time")
    return formats.pop()  # type: ignore[return-value]


def files_revision(files: Sequence[Path]) -> str:
    """Content identifier of local files (name, size and SHA-256 of each), for the manifest."""
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode())
        digest.update(str(path.stat().st_size).encode())
        with open(path, "rb") as fh:
            while block := fh.read(1 << 20):
                digest.update(block)
    return f"local-files:{len(files)}:{digest.hexdigest()[:16]}"


def iter_rows(
    dataset: HubDataset,
    *,
    local_files: Sequence[str | Path] | None = None,
    cache_dir: Path | None = None,
    shuffle_seed: int | None = None,
    shuffle_buffer: int = 0,
) -> Iterator[dict[str, Any]]:
    """Rows as dicts, from ``local_files`` when given, else from the hub at the pinned revision.

    With ``shuffle_seed`` the stream is shuffled the way ``datasets`` shuffles iterable
    datasets (shard order plus a ``shuffle_buffer``-sized buffer), as in PrE-Text's c4 recipe.
    """
    shuffled = shuffle_seed is not None and shuffle_buffer > 0
    where = "local files" if local_files else dataset.describe()
    try:
        if local_files and not shuffled:
            for path in expand_files(local_files):
                yield from read_local(path)
            return
        stream = _open(dataset, local_files, cache_dir)
        if shuffled:
            stream = stream.shuffle(seed=shuffle_seed, buffer_size=shuffle_buffer)
        yield from stream
    except (OSError, ValueError, csv.Error) as exc:
        raise HubError(f"reading {where} failed: {exc}") from exc


def opener(path: Path):
    """``open`` for ``path``, transparently decompressing .gz/.bz2/.xz."""
    name = path.name.lower()
    if name.endswith(".gz"):
        return gzip.open
    if name.endswith(".bz2"):
        return bz2.open
    if name.endswith(".xz"):
        return lzma.open
    return open


def read_local(path: Path) -> Iterator[dict[str, Any]]:
    """Rows of one local file: parquet, JSON lines or a JSON array, or CSV with a header."""
    kind = local_format([path])
    if kind == "parquet":
        import pyarrow.parquet as pq

        for batch in pq.ParquetFile(path).iter_batches(batch_size=1024):
            yield from batch.to_pylist()
        return
    with opener(path)(path, "rt", encoding="utf-8", newline="") as handle:
        if kind == "csv":
            csv.field_size_limit(1 << 30)
            yield from csv.DictReader(handle)
            return
        first = handle.read(1)
        while first and first.isspace():
            first = handle.read(1)
        if first == "[":  # a JSON array rather than JSON lines
            yield from json.loads(first + handle.read())
            return
        for number, line in enumerate(itertools.chain([first + handle.readline()], handle), 1):
            if line.strip():
                try:
                    yield json.loads(line)
                except ValueError as exc:
                    raise HubError(f"{path}: line {number} is not JSON ({exc})") from exc


def _open(dataset: HubDataset, local_files: Sequence[str | Path] | None, cache_dir: Path | None):
    import datasets  # heavy (imports torch); only hub reads and shuffled streams pay for it

    hf_cache = str(Path(cache_dir) / "hf") if cache_dir else None
    if local_files:
        files = expand_files(local_files)
        return datasets.load_dataset(
            local_format(files),
            data_files=[str(p) for p in files],
            split="train",
            streaming=True,
            cache_dir=hf_cache,
        )
    try:
        loaded = datasets.load_dataset(
            dataset.repo,
            name=dataset.config,
            split=dataset.split,
            revision=dataset.revision,
            data_files=list(dataset.data_files) if dataset.data_files else None,
            data_dir=dataset.data_dir,
            streaming=dataset.streaming,
            cache_dir=hf_cache,
        )
    except Exception as exc:  # datasets raises many types (offline, 404, auth, schema)
        raise HubError(
            f"cannot load {dataset.describe()} from the Hugging Face hub: {exc}. "
            "Offline or blocked? Download the files elsewhere and pass them with "
            "--option files=PATH (same columns as the hub dataset)."
        ) from exc
    return loaded if dataset.streaming else loaded.to_iterable_dataset()
