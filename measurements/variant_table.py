"""The results table the papers' variant scripts write: mean ± standard error over seeds."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def write_record(out: Path, name: str, seed: int, record: dict[str, Any]) -> None:
    """One result record per (variant, seed), so workers sharing ``out`` never collide."""
    path = out / f"{name}-seed{seed}.json"
    path.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")


def read_records(out: Path, names: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    """Every record in ``out`` per variant, in the order of ``names``."""
    records: dict[str, list[dict[str, Any]]] = {}
    for name in names:
        for path in sorted(out.glob(f"{name}-seed*.json")):
            records.setdefault(name, []).append(json.loads(path.read_text()))
    return records


def summary(
    records: dict[str, list[dict[str, Any]]],
    reported: Sequence[str],
    scale: float = 1.0,
    epsilon_label: str = "ε",
) -> str:
    """A markdown table: per variant its ε, the seed count and each metric's mean ± s.e.
    (values multiplied by ``scale``, e.g. 100 for the papers' accuracy in %)."""
    head = f"| variant | {epsilon_label} | seeds | " + " | ".join(reported) + " |"
    lines = [head, "|" + "---|" * (3 + len(reported))]
    digits = 2 if scale != 1.0 else 4
    for name, recs in records.items():
        eps = recs[0]["privacy"]["epsilon"]
        cells = []
        for key in reported:
            values = [scale * r["metrics"][key] for r in recs if key in r["metrics"]]
            se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0
            mean = statistics.mean(values) if values else math.nan
            cells.append(f"{mean:.{digits}f} ± {se:.{digits}f}" if values else "—")
        eps_cell = eps if isinstance(eps, str) else f"{eps:.3f}"
        lines.append(f"| {name} | {eps_cell} | {len(recs)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
