"""Per-client hits in leaderboard entries: kept from the run records, read back for the
paired bootstrap intervals of the tables (:mod:`benchmark.evaluation.stats`).

An entry's ``per_client`` maps a metric label (``next_token``, ``win_rate``) and a part
(``test``, ``validation``) to the hash of the sorted client-id list, the tokens per client
and the hits per seed and client of each score the record kept them for (``top1_hits``
for ``next_token.top1``, ``win_rate_hits`` for ``win_rate.win_rate``;
:mod:`benchmark.evaluation.client_counts`), seeds in the entry's seed order. ``tokens`` is
one list when every seed scored the same tokens (a text release: same test texts, same
tokenizer), else one list per seed (a win rate that judges another subset of the test
tuples per seed). It is kept only when every seed's record has it for the same clients
and its sums give each seed's published score exactly; entries from records without it
have none, and tables fall back to seed-only intervals for them (marked).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from benchmark.evaluation.stats import ClientHits

_COUNTS = {"type": "array", "items": {"type": "integer", "minimum": 0}}
_PER_SEED = {"type": "array", "items": _COUNTS, "minItems": 1}
HITS_SUFFIX = "_hits"
PER_CLIENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": {
        "type": "object",
        "additionalProperties": {
            "type": "object",
            "required": ["clients_sha256", "tokens"],
            "minProperties": 3,  # and at least one score's hits
            "additionalProperties": False,
            "properties": {
                "clients_sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
                "tokens": {"oneOf": [_COUNTS, _PER_SEED]},
            },
            "patternProperties": {f"^[a-z0-9_]+{HITS_SUFFIX}$": _PER_SEED},
        },
    },
}


def _scores(counts: dict[str, Any]) -> list[str]:
    """The hits fields (``<score>_hits``) one part's counts keep."""
    return sorted(k for k in counts if k.endswith(HITS_SUFFIX))


def _part_of_seeds(label: str, part: str, records: Sequence[dict[str, Any]]) -> dict | None:
    """One part's counts over the seeds, or None when a seed lacks them, the seeds scored
    different clients or another score, or a sum misses a seed's published score."""
    found = []
    for record in records:
        counts = (
            record.get("evaluation", {}).get("metrics", {}).get(label, {}).get("per_client", {})
        )
        if part not in counts:
            return None
        found.append(counts[part])
    first = found[0]
    scores = _scores(first)
    if not scores or any(
        (c["clients_sha256"], _scores(c)) != (first["clients_sha256"], scores) for c in found
    ):
        return None
    tokens = [list(c["tokens"]) for c in found]
    if part == "test":
        for record, counts, scored in zip(records, found, tokens, strict=True):
            for hits in scores:
                published = record["metrics"].get(f"{label}.{hits.removesuffix(HITS_SUFFIX)}")
                if (
                    not sum(scored)
                    or published is None
                    or not math.isclose(sum(counts[hits]) / sum(scored), published, rel_tol=1e-12)
                ):
                    return None
    shared = all(t == tokens[0] for t in tokens)
    return {
        "clients_sha256": first["clients_sha256"],
        "tokens": tokens[0] if shared else tokens,
        **{hits: [list(c[hits]) for c in found] for hits in scores},
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
    """(client-list hash, hits) behind ``metric`` (``<label>.<score>``) of ``entry``, or
    None when the entry has no per-client counts for it."""
    label, _, score = metric.rpartition(".")
    counts = entry.get("per_client", {}).get(label, {}).get(part)
    if not counts or f"{score}{HITS_SUFFIX}" not in counts:
        return None
    hits = np.asarray(counts[f"{score}{HITS_SUFFIX}"], dtype=np.int64)
    tokens = np.asarray(counts["tokens"], dtype=np.int64)
    if tokens.ndim == 1:  # the same on every seed
        tokens = np.tile(tokens, (hits.shape[0], 1))
    return counts["clients_sha256"], ClientHits(hits, tokens)
