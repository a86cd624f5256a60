"""Behaviour unchanged across a refactor: the tiny suites' records, before and after.

Runs every cell of ``tiny`` and ``tiny_prefs`` on the isolated path with spec-seeded noise
(``noise_seed: spec``, so the DP noise repeats) into ``OUT/<suite>/<row>.json``, resuming
where a file exists. Run it once from a checkout of the old commit and once from the new
one (each with its own code first on ``PYTHONPATH``), then ``--compare`` the two folders:
every field must be identical apart from the code version, the split's path (and the run
key's digest of it) and the wall time.

Run::

    PYTHONPATH=<old checkout> python measurements/tiny_record_identity.py run OLD
    PYTHONPATH=<new checkout> python measurements/tiny_record_identity.py run NEW
    python measurements/tiny_record_identity.py compare OLD NEW
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

SUITES = ("tiny", "tiny_prefs")
EXPECTED = {"/code_version", "/run_key", "/spec/split/path", "/wall_seconds"}


def run_all(out: Path) -> None:
    from benchmark.runner import run
    from leaderboard.suites import ensure_split

    try:
        from leaderboard.catalog import SUITES as NAMED
    except ImportError:  # a checkout from before the suite catalog
        from leaderboard.suites import SUITES as NAMED

    for name in SUITES:
        suite = NAMED[name]
        split_path = ensure_split(suite, out / "splits")
        (out / name).mkdir(parents=True, exist_ok=True)
        for row, eps, seed in suite.grid():
            target = out / name / f"{row}.json"
            if target.exists():
                continue
            cell = suite.spec(row, eps, seed, split_path)
            seeded = dataclasses.replace(cell.privacy, noise_seed="spec", guarantee="simulated")
            cell = dataclasses.replace(cell, privacy=seeded)
            record = run(cell, runs_root=out / "runs" / name, isolated=True).record
            target.write_text(json.dumps(record, indent=1, sort_keys=True, default=str))
            print(name, row, "done", flush=True)


def differences(a: Any, b: Any, path: str = "") -> list[str]:
    """The paths where two records differ (a key on one side only counts)."""
    if isinstance(a, dict) and isinstance(b, dict):
        found = []
        for key in sorted(set(a) | set(b)):
            if key not in a or key not in b:
                found.append(f"{path}/{key}")
            else:
                found += differences(a[key], b[key], f"{path}/{key}")
        return found
    return [] if a == b else [path]


def compare(old: Path, new: Path) -> int:
    """Print each record's verdict; return how many differ unexpectedly."""
    bad = 0
    for name in SUITES:
        rows = sorted(
            {p.name for p in (old / name).glob("*.json")}
            & {p.name for p in (new / name).glob("*.json")}
        )
        for row in rows:
            a = json.loads((old / name / row).read_text())
            b = json.loads((new / name / row).read_text())
            unexpected = [d for d in differences(a, b) if d not in EXPECTED]
            same_cell = a["run_key"].rsplit("__", 1)[0] == b["run_key"].rsplit("__", 1)[0]
            bad += bool(unexpected) or not same_cell
            print(f"{name}/{row}: {unexpected or 'identical'}")
    print(f"unexpected differences in {bad} records")
    return bad


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("run").add_argument("out", type=Path)
    both = sub.add_parser("compare")
    both.add_argument("old", type=Path)
    both.add_argument("new", type=Path)
    args = parser.parse_args()
    if args.command == "run":
        run_all(args.out)
    else:
        raise SystemExit(1 if compare(args.old, args.new) else 0)


if __name__ == "__main__":
    main()
