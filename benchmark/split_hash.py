"""The content hash that pins a split: shared by its manifest (which records it) and its
storage (which checks it when a split is loaded), so neither imports the other for it.

``content_hash`` is sha256 over a format tag, the canonical JSON of ``source`` (less its
free-text description) and ``build``, the client sidecar's sha256, and every record of
every part in stored order. ``version`` is ``"v-" + content_hash[:12]``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from benchmark.data import PARTS

FORMAT = "fedsynth-split/1"


def canonical(obj: Any) -> bytes:
    """One byte string per JSON value: sorted keys, no whitespace, UTF-8."""
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def hashed_source(source_section: Mapping[str, Any]) -> dict[str, Any]:
    """The part of the source section that defines the data (the description is prose)."""
    return {k: v for k, v in source_section.items() if k != "description"}


def content_hash(
    parts: Mapping[str, Iterable[Mapping[str, Any]]],
    source_section: Mapping[str, Any],
    build_section: Mapping[str, Any],
    clients_sha256: str,
) -> str:
    digest = hashlib.sha256()
    digest.update(FORMAT.encode() + b"\n")
    digest.update(canonical(hashed_source(source_section)) + b"\n")
    digest.update(canonical(build_section) + b"\n")
    digest.update(clients_sha256.encode() + b"\n")
    for part in PARTS:
        digest.update(f"part {part}\n".encode())
        for record in parts.get(part, []):
            digest.update(canonical(record) + b"\n")
    return digest.hexdigest()


def version_of(hash_hex: str) -> str:
    return f"v-{hash_hex[:12]}"
