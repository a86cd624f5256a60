"""A small in-memory dated Source for pipeline tests (counts its fetches, can fail midway)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from datasets_builders.source import Source, SourceRecord


class ToySource(Source):
    name = "toy"
    description = "in-test records"
    date_field = "posted"

    def __init__(self, records: list[SourceRecord], fail_after: int | None = None) -> None:
        self.records = records
        self.fail_after = fail_after
        self.fetches = 0

    def fetch(self, options: dict[str, Any], cache_dir: Path) -> Iterator[SourceRecord]:
        self.fetches += 1
        for index, record in enumerate(self.records):
            if self.fail_after is not None and index >= self.fail_after:
                raise ConnectionError(f"toy origin unreachable after {index} records")
            yield record

    def revision(self, options: dict[str, Any]) -> str:
        return "toy-1"


def make_records(
    n_clients: int = 20, docs_per_client: int = 3, labels: tuple[str, ...] = ("a", "b", "c")
) -> list[SourceRecord]:
    """Distinct dated documents, each client's documents on consecutive days of 2023."""
    records = []
    for c in range(n_clients):
        for d in range(docs_per_client):
            day = 1 + (c + d) % 28
            label = labels[(c + d) % len(labels)]
            records.append(
                SourceRecord(
                    text=f"Client {c} writes document {d} about topic {label}.",
                    source_id=f"toy:{c}:{d}",
                    client_id=f"user{c:03d}",
                    date=f"2023-05-{day:02d}",
                    label=label,
                    licence="cc_by" if c % 4 else "cc_by_nc",
                )
            )
    return records
