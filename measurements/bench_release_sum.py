"""What the coordinator spends per client of a release on rows as long as a model delta.

Measured, for ``--clients`` float32 rows of ``--dim`` coordinates (default: paper 002's
small transformer, 11.6 M parameters), per client, best of ``--repeats``, each figure
beside its baseline on the same machine:

- ``clip_and_sum_s``: the pool's clipped float64 sum into a buffer reused across the
  release (``ClientPool._clipped_sum``); ``clip_and_sum_fresh_s``: into a fresh array per
  client, as the pool did before;
- ``check_s``: one :func:`~benchmark.federation.independence_check.rows_match` of a
  recomputed row against the pool's (a release checks ``INDEPENDENCE_CHECKS`` clients);
  ``check_whole_row_s``: the same comparison on float64 copies of the whole rows, as
  ``rows_match`` did before.

Run: ``.venv/bin/python measurements/bench_release_sum.py [--dim N] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from benchmark.federation.independence_check import TOLERANCE, rows_match
from benchmark.federation.pool import clipped_row_sum

CLIP = 0.3


def _sum_reused(rows: list[np.ndarray], _: list[np.ndarray]) -> None:
    total, buffer = np.zeros(rows[0].size), np.empty(rows[0].size)
    for row in rows:
        np.add(total, clipped_row_sum(row[None], CLIP, out=buffer), out=total)


def _sum_fresh(rows: list[np.ndarray], _: list[np.ndarray]) -> None:
    total = np.zeros(rows[0].size)
    for row in rows:
        total += clipped_row_sum(row[None], CLIP)


def _check(rows: list[np.ndarray], again: list[np.ndarray]) -> None:
    for row, recomputed in zip(rows, again, strict=True):
        assert rows_match({"row": row}, {"row": recomputed})


def _check_whole_row(rows: list[np.ndarray], again: list[np.ndarray]) -> None:
    for row, recomputed in zip(rows, again, strict=True):
        want = row.astype(np.float64).ravel()
        norm = float(np.linalg.norm(want))
        assert float(np.linalg.norm(recomputed.astype(np.float64).ravel() - want)) <= (
            TOLERANCE * max(1.0, norm)
        )


Step = Callable[[list[np.ndarray], list[np.ndarray]], None]


def _per_client(step: Step, rows: list[np.ndarray], again: list[np.ndarray], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        step(rows, again)
        best = min(best, time.perf_counter() - start)
    return best / len(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim", type=int, default=11_608_992)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    rows = [rng.normal(size=args.dim).astype(np.float32) for _ in range(args.clients)]
    again = [row.copy() for row in rows]
    steps = {
        "clip_and_sum_s": _sum_reused,
        "clip_and_sum_fresh_s": _sum_fresh,
        "check_s": _check,
        "check_whole_row_s": _check_whole_row,
    }
    figures = {"dim": args.dim, "clients": args.clients}
    for name, step in steps.items():
        figures[name] = _per_client(step, rows, again, args.repeats)
    text = json.dumps(figures, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
