"""The quarantine for non-private diagnostics (e.g. PrE-Text NN distances, POPri recovery rates).

Values computed from private data without noise may be useful for debugging but are not
DP. They can only be written here, under ``<run dir>/private_diagnostics/``; result
records and leaderboard exports never read this directory.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

QUARANTINE_DIRNAME = "private_diagnostics"


class Diagnostics:
    """Append-only JSON-lines sink for non-private values of one run."""

    def __init__(self, run_dir: Path) -> None:
        self.dir = run_dir / QUARANTINE_DIRNAME

    def write(self, name: str, value: Any, round_index: int | None = None) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        with (self.dir / "diagnostics.jsonl").open("a") as sink:
            sink.write(json.dumps({"name": name, "round": round_index, "value": value}) + "\n")

    def read(self) -> list[dict[str, Any]]:
        path = self.dir / "diagnostics.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines()]
