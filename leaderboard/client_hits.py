"""Per-client next-token hits in leaderboard entries: kept from the run records, read back
for the paired bootstrap intervals of the tables (:mod:`benchmark.evaluation.stats`).

An entry's ``per_client`` maps a metric label (``next_token``) and a part (``test``,
``validation``) to the hash of the sorted client-id list, the predicted tokens per client
(the same on every seed) and the top-1 hits per seed and client, seeds in the entry's seed
order. It is kept only when every seed's record has it for the same clients and tokens and
its sums give each seed's published top-1 exactly; entries from records without it have
none, and tables fall back to seed-only intervals for them (marked).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from benchmark.evaluation.stats import ClientHits

_COUNTS = {"type": "array", "items": {"type": "integer", "minimum": 0}}
PER_CLIENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": {
        "type": "object",
        "additionalProperties": {
            "type": "object",
            "required": ["clients_sha256", "tokens", "top1_hits"],
            "additionalProperties": False,
            "properties": {
                "clients_sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
                "tokens": _COUNTS,
                "top1_hits": {"type": "array", "items": _COUNTS, "minItems": 1},
            },
        },
    },
}


def _part_of_seeds(label: str, part: str, records: Sequence[dict[str, Any]]) -> dict | None:
    """One part's counts over the seeds, or None when a seed lacks them or they disagree."""
    found = []
    for record in records:
        counts = (
            record.get("evaluation", {}).get("metrics", {}).get(label, {}).get("per_client", {})
        )
        if part not in counts:
            return None
        found.append(counts[part])
    first = found[0]
    if any(
        (c["clients_sha256"], c["tokens"]) != (first["clients_sha256"], first["tokens"])
        for c in found
    ):
        return None
    total = sum(first["tokens"])
    if part == "test" and total:
        for record, counts in zip(records, found, strict=True):
            published = record["metrics"].get(f"{label}.top1")
            if published is None or not math.isclose(
                sum(counts["top1_hits"]) / total, published, rel_tol=1e-12
            ):
                return None
    return {
        "clients_sha256": first["clients_sha256"],
        "tokens": list(first["tokens"]),
        "top1_hits": [list(c["top1_hits"]) for c in found],
    }


def entry_client_hits(run_records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The ``per_client`` field of the entry aggregating ``run_records`` (sorted by seed),
    as ``{"per_client": ...}``, or ``{}`` when no metric kept per-client counts."""
    labels = {
        label
        for label, values in run_records[0].get("evaluation", {}).get("metrics", {}).items()
        if isinstance(values, dict) and "per_client" in values
    }
    kept: dict[str, dict[str, Any]] = {}
    for label in sorted(labels):
        parts = run_records[0]["evaluation"]["metrics"][label]["per_client"]
        for part in sorted(parts):
            counts = _part_of_seeds(label, part, run_records)
            if counts is not None:
                kept.setdefault(label, {})[part] = counts
    return {"per_client": kept} if kept else {}


def client_hits_of(
    entry: dict[str, Any], metric: str, part: str = "test"
) -> tuple[str, ClientHits] | None:
    """(client-list hash, hits) behind ``metric`` (``<label>.top1``) of ``entry``, or None
    when the entry has no per-client counts for it."""
    label, _, key = metric.rpartition(".")
    if key != "top1":
        return None
    counts = entry.get("per_client", {}).get(label, {}).get(part)
    if not counts:
        return None
    hits = np.asarray(counts["top1_hits"], dtype=np.int64)
    tokens = np.tile(np.asarray(counts["tokens"], dtype=np.int64), (hits.shape[0], 1))
    return counts["clients_sha256"], ClientHits(hits, tokens)
