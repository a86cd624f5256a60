"""The one in-memory container for a federated split, shared by every layer.

A split has four parts: ``train`` (the private clients, only ever handed to the client
pool), ``validation`` and ``test`` (held-out clients, for model selection and reporting),
and ``public`` (data a method may read freely, e.g. an initial population or a
pretraining corpus). Records are plain dicts with the column names below.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

# Namespaced column names, so that every layer agrees on them.
TEXT = "text"
CLIENT_ID = "client_id"
DATE = "date"
LABEL = "label"
STRONG = "strong"  # a training client's capability flag (paper 001), in each of its rows
SOURCE_ID = "source_id"
PRIVATE_PARTS = ("train", "validation", "test")
HELD_OUT = ("validation", "test")  # scored, never trained on: per-client detail may be published
PARTS = (*PRIVATE_PARTS, "public")


@dataclass
class FederatedSplit:
    """A versioned federated split: records per part plus the manifest that pins them."""

    name: str
    manifest: dict[str, Any]
    parts: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def version(self) -> str:
        return str(self.manifest.get("version", "unversioned"))

    @property
    def content_hash(self) -> str:
        return str(self.manifest.get("content_hash", ""))

    def records(self, part: str) -> list[dict[str, Any]]:
        if part not in PARTS:
            raise KeyError(f"unknown split part {part!r}; expected one of {PARTS}")
        return self.parts.get(part, [])

    def texts(self, part: str) -> list[str]:
        return [r[TEXT] for r in self.records(part)]

    def by_client(self, part: str) -> dict[str, list[dict[str, Any]]]:
        """Group a part's records by client id, clients in sorted order."""
        return group_by_client(self.records(part))


def group_by_client(records: Iterable[Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    grouped: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        grouped[str(record[CLIENT_ID])].append(dict(record))
    return {cid: grouped[cid] for cid in sorted(grouped)}
