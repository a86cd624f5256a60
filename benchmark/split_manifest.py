"""Split manifests: what a split is, and a content hash that pins it.

The manifest is a JSON document with these sections:

- ``source``: name, revision, source options, description, demo flag, date field;
- ``build``: every option that defines the split (seed, window, filters, partition,
  tokenizer + its file hash, span length, cap, held-out and public rules, max records);
- ``filters``, ``partition``, ``chunking``: what those options did (drop counts, client
  map sidecar and its sha256, …);
- ``counts``: clients and samples per part with a per-client distribution summary,
  label and date ranges; ``licences``: documents per licence;
- ``fetched_at`` / ``built_at``: recorded for provenance but **not** hashed, so two builds
  of the same spec share one ``content_hash`` and one ``version``.

``content_hash`` is sha256 over a format tag, the canonical JSON of ``source`` (less its
free-text description) and ``build``, the sidecar's sha256, and every record of every
part in stored order. ``version`` is ``"v-" + content_hash[:12]``.
:func:`benchmark.split_storage.verify` recomputes all of it from the files on disk.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Mapping
from typing import Any

from benchmark.data import CLIENT_ID, DATE, LABEL

# Above this many distinct labels a part's label counts are summarised by their number.
MAX_LISTED_LABELS = 100


# what one unit is for the privacy units that are not the split's client
_SAMPLE_UNITS = {
    "sample": "one sample (a person may contribute many: their guarantee is group privacy)",
    "central": "one sample, central DP (a person may contribute many)",
    "client_sample": "one sample of a client, DP per client (a person may contribute many)",
}


def unit_statement(manifest: Mapping[str, Any], unit: str) -> str:
    """The privacy unit in words, as a record states it: for ``user`` the split's own
    statement (e.g. "user = one chat participant, ≤ 8 spans each"); splits built before
    the manifest carried one say so instead of guessing."""
    if unit != "user":
        return f"{unit} = {_SAMPLE_UNITS.get(unit, unit)}"
    stated = manifest.get("privacy_unit", {}).get("statement")
    return stated or "user = one client of the split (its manifest does not say what a client is)"


def summarise_part(rows: list[Mapping[str, Any]]) -> dict[str, Any]:
    """Counts of one part: clients, samples, samples per client, labels and dates."""
    per_client = Counter(str(row[CLIENT_ID]) for row in rows)
    sizes = sorted(per_client.values())
    summary: dict[str, Any] = {"clients": len(per_client), "samples": len(rows)}
    if sizes:
        summary["samples_per_client"] = {
            "min": sizes[0],
            "median": statistics.median(sizes),
            "mean": round(len(rows) / len(sizes), 3),
            "max": sizes[-1],
        }
    labels = Counter(row[LABEL] for row in rows if row.get(LABEL) is not None)
    if len(labels) <= MAX_LISTED_LABELS:
        summary["labels"] = dict(sorted(labels.items()))
    else:
        summary["n_labels"] = len(labels)
    dates = sorted(row[DATE] for row in rows if row.get(DATE))
    if dates:
        summary["dates"] = {"min": dates[0], "max": dates[-1]}
        if len(dates) < len(rows):  # a contamination check cannot date these
            summary["undated"] = len(rows) - len(dates)
    return summary
