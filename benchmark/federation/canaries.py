"""Canary units for the one-run privacy audit (:mod:`benchmark.privacy.audit`): the
coordinator's side, which alone knows which canaries are in the run.

A run whose evaluation lists the ``canary`` metric gets ``m = min(1000, n_units // 10)``
canaries (none below :data:`MIN_CANARIES`). The canaries are **real privacy units of the
split's train part**, drawn at random with the run's pool seed: each keeps its own records
(texts, dates, labels, ids, as many as it has), so nothing about a canary tells it apart
from the units around it — an adapter that leaves out the units it suspects are canaries
leaves out random real units. Each canary is in the run with probability 1/2 (Steinke et
al.'s Algorithm 1): an excluded canary is held out of the run, a unit of the same
distribution that the run never sees. The draw, its order and the bits come from the pool
seed through a stream of their own, so they are in neither the spec nor the record, and a
resumed run draws the same ones. The evaluator scores all m after the release
(:mod:`benchmark.evaluation.canary_audit`).

The run's population is the split's train units minus the excluded canaries (about m/2,
5 % of the units): a run that lists the audit trains on slightly fewer units than one that
does not, which is why the audit is a training metric (``leaderboard/tuning.py``).

Earlier canaries were markers (eight random public words, one record per unit); client code
could recognise and drop them and the audit then reported 0 for a release of every train
text (issue 33, class 9). ``tests/test_verbatim.py`` keeps that recogniser and shows it
finds no canary among these.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

MAX_CANARIES = 1000
MIN_CANARIES = 10
CANARY_STREAM = 0xCA7A  # the plan's own stream of the pool seed


@dataclass(frozen=True)
class CanaryPlan:
    """The m canary units (ids and records, in draw order), which are in the run, and δ."""

    unit_ids: tuple[str, ...]
    units: tuple[tuple[dict[str, Any], ...], ...]
    included: tuple[bool, ...]
    delta: float
    blind: bool  # False when the bits can be derived from the public spec (noise_seed: spec)

    @property
    def excluded(self) -> frozenset[str]:
        """The held-out canaries: units of the split that are not in the run."""
        return frozenset(u for u, i in zip(self.unit_ids, self.included, strict=True) if not i)


def canary_count(n_units: int) -> int:
    """m: the paper's 1,000 at most, and a tenth of the population (half of them held out)."""
    m = min(MAX_CANARIES, n_units // 10)
    return m if m >= MIN_CANARIES else 0


def plan_canaries(
    units: dict[str, list[dict[str, Any]]], seed: int, delta: float, blind: bool
) -> CanaryPlan:
    """Draw the canaries of a run over ``units`` (the train part by privacy unit) from its
    pool ``seed``: m distinct units, uniformly, then one fair coin per canary."""
    m = canary_count(len(units))
    if m == 0:
        raise ValueError(
            f"the canary audit needs at least {10 * MIN_CANARIES} privacy units, "
            f"the split has {len(units)}"
        )
    rng = np.random.default_rng([seed % 2**63, CANARY_STREAM])
    ids = sorted(units)
    chosen = tuple(ids[int(i)] for i in rng.choice(len(ids), size=m, replace=False))
    included = tuple(bool(b) for b in rng.random(m) < 0.5)
    records = tuple(tuple(dict(r) for r in units[u]) for u in chosen)
    return CanaryPlan(chosen, records, included, delta, blind)


def audited_units(
    units: dict[str, list[dict[str, Any]]], plan: CanaryPlan
) -> dict[str, list[dict[str, Any]]]:
    """The run's population: ``units`` without the excluded canaries (the included ones
    stay as they are, under their own ids)."""
    held_out = plan.excluded
    return {u: records for u, records in units.items() if u not in held_out}
