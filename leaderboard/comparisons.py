"""Each table row against the table's references, with intervals that count test clients.

A cell's own interval (:func:`cell_intervals`) resamples the test clients and the seeds
where its entry kept per-client hits (next-token top-1, the preference track's win rate
and reward accuracy), else it is the t-interval over seeds the entry carries.

For a row of a next-token table this computes (method − public_only), (method −
generator_only) and the gap closed ((method − public_only) / (nonprivate − public_only)),
each with a paired bootstrap 95 % interval over test clients and seeds
(:class:`~benchmark.evaluation.stats.PairedBootstrap`), and the bounds' separation
(nonprivate − public_only) in paired SEs. References come from the row's own store when it
has them (a user's full suite run), else from the primary store, as gap closed does.

Rows are paired only when both entries kept per-client hits for the same test clients (the
hash of the client-id list) over at least two seeds each. Otherwise the comparison falls
back to a Welch t-interval over the seeds' values (``basis`` = :data:`SEEDS_ONLY`), which
omits test sampling and is shown marked as such; gap closed then has no interval. A row with
one seed gets no interval anywhere (NaN bounds: its seeds' variance is unknown), whether or
not it kept hits.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmark.evaluation.stats import ClientHits, Interval, PairedBootstrap, seed_difference
from leaderboard.client_hits import client_hits_of
from leaderboard.store import Row

# The references a row is compared with: (method name, ε budget of its entry).
PUBLIC_ONLY = ("public_only", 0.0)
NONPRIVATE = ("nonprivate", math.inf)
GENERATOR_ONLY = ("generator_only", 0.0)
REFERENCES = {
    "public_only": PUBLIC_ONLY,
    "nonprivate": NONPRIVATE,
    "generator_only": GENERATOR_ONLY,
}
REPLICATES = 2000
BOOTSTRAP_SEED = 0  # fixed: a table prints the same intervals every time
CLIENTS_AND_SEEDS = "test clients + seeds"
SEEDS_ONLY = "seeds only"


@dataclass(frozen=True)
class Estimate:
    """An interval and what it resamples (:data:`CLIENTS_AND_SEEDS` or :data:`SEEDS_ONLY`)."""

    interval: Interval
    basis: str

    def to_json(self) -> dict[str, Any]:
        """The interval (NaN bounds, where there is none, as null) and its basis."""
        values = {k: None if math.isnan(v) else v for k, v in self.interval.as_dict().items()}
        return {**values, "basis": self.basis}


@dataclass(frozen=True)
class Comparison:
    """One row's differences; None where undefined (no such reference in the table, or no
    variance to estimate an interval from)."""

    vs_public: Estimate | None = None
    vs_generator: Estimate | None = None
    gap: Estimate | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            name: None if value is None else value.to_json()
            for name, value in (
                ("minus_public_only", self.vs_public),
                ("minus_generator_only", self.vs_generator),
                ("gap_closed", self.gap),
            )
        }


@dataclass(frozen=True)
class Separation:
    """nonprivate − public_only and how many SEs apart they are, paired and unpaired."""

    basis: str
    difference: Interval
    unpaired_se: float | None = None

    @property
    def ses_apart(self) -> float:
        return self.difference.point / self.difference.se if self.difference.se else math.inf

    def to_json(self) -> dict[str, Any]:
        unpaired = self.unpaired_se
        return {
            "basis": self.basis,
            "difference": self.difference.as_dict(),
            "ses_apart": self.ses_apart if math.isfinite(self.ses_apart) else None,
            "unpaired_se": unpaired,
            "unpaired_ses_apart": self.difference.point / unpaired if unpaired else None,
        }


@dataclass
class Comparisons:
    cells: dict[tuple[str, float], Comparison] = field(default_factory=dict)
    separation: Separation | None = None


def _references(rows: Sequence[Row]) -> dict[str, dict[str, Row]]:
    """Per store, its reference rows by name (``public_only``, ``nonprivate``, ...)."""
    found: dict[str, dict[str, Row]] = {}
    by_key = {v: k for k, v in REFERENCES.items()}
    for row in rows:
        name = by_key.get((row.entry["method"]["name"], row.epsilon_budget))
        if name:
            found.setdefault(row.store, {})[name] = row
    return found


def _values(row: Row, metric: str) -> list[float]:
    summary = row.entry["metrics"][metric]
    return list(summary.get("values") or [summary["mean"]])


class _Arms:
    """The rows' per-client hits and one bootstrap per set of test clients."""

    def __init__(self, metric: str) -> None:
        self.metric = metric
        self._boots: dict[str, PairedBootstrap] = {}

    def hits(self, row: Row) -> tuple[str, ClientHits] | None:
        return client_hits_of(row.entry, self.metric)

    def boot(self, rows: Sequence[Row]) -> PairedBootstrap | None:
        """The bootstrap all ``rows`` can be paired in, or None when one has no hits, has
        one seed, or they scored different clients.

        One seed says nothing of the seeds' variance, so its row gets no interval here, as
        it gets none over seeds: a client-only interval would leave out the part that
        dominates a DP release's uncertainty and read narrower than it is."""
        found = [self.hits(r) for r in rows]
        if any(f is None or f[1].seeds < 2 for f in found):
            return None
        if len({f[0] for f in found}) != 1:  # type: ignore[index]
            return None
        digest, hits = found[0]  # type: ignore[misc]
        if digest not in self._boots:
            self._boots[digest] = PairedBootstrap(hits.clients, REPLICATES, BOOTSTRAP_SEED)
        return self._boots[digest]

    def arm(self, row: Row) -> tuple[str, ClientHits]:
        found = self.hits(row)
        assert found is not None
        return f"{row.store}/{row.method}@{row.epsilon_budget}", found[1]

    def difference(self, row: Row, ref: Row | None) -> Estimate | None:
        """``row − ref``: paired over test clients and seeds when both kept per-client hits
        for the same clients, else over seeds only (None when that has no variance)."""
        if ref is None:
            return None
        boot = self.boot([row, ref])
        if boot is not None:
            return Estimate(boot.difference(self.arm(row), self.arm(ref)), CLIENTS_AND_SEEDS)
        a, b = _values(row, self.metric), _values(ref, self.metric)
        interval = seed_difference(a, b) or _point_only(sum(a) / len(a) - sum(b) / len(b))
        return Estimate(interval, SEEDS_ONLY)

    def alone(self, row: Row) -> Interval | None:
        """The row's own interval over test clients and seeds; None where :meth:`boot` has
        none."""
        boot = self.boot([row])
        if boot is None:
            return None
        name, hits = self.arm(row)
        return boot.interval(hits.point(), boot.replicates_of(name, hits))

    def gap(self, row: Row, low: Row | None, high: Row | None) -> Estimate | None:
        """Paired gap closed; None without both bounds' and the row's per-client hits."""
        boot = None if low is None or high is None else self.boot([row, low, high])
        if boot is None:
            return None
        lo, hi = self.arm(low), self.arm(high)  # type: ignore[arg-type]
        if lo[1].point() == hi[1].point():
            return None
        return Estimate(boot.gap_closed(self.arm(row), lo, hi), CLIENTS_AND_SEEDS)


def cell_intervals(rows: Sequence[Row], metric: str) -> dict[tuple[str, float], Interval]:
    """Each row's 95 % interval over test clients and seeds (the client draws shared with
    the differences below), for the rows whose entries kept per-client hits of ``metric``:
    a table cell's interval then counts test sampling, not only its seeds'."""
    arms = _Arms(metric)
    found = {(r.method, r.epsilon_budget): arms.alone(r) for r in rows}
    return {key: interval for key, interval in found.items() if interval is not None}


def client_difference(row: Row, ref: Row, metric: str) -> Interval | None:
    """``row − ref`` paired over test clients and seeds, or None unless both entries kept
    per-client hits of ``metric`` for the same clients over at least two seeds each."""
    arms = _Arms(metric)
    boot = arms.boot([row, ref])
    return None if boot is None else boot.difference(arms.arm(row), arms.arm(ref))


def compare(rows: Sequence[Row], metric: str, roles: dict[str, str]) -> Comparisons:
    """Every non-bound row of ``rows`` (one split) against its references: the bounds of
    its own store when it has both, else the primary store's, and its own store's
    generator_only, else the primary's."""
    if metric.rpartition(".")[2] != "top1":
        return Comparisons()
    refs = _references(rows)
    primary = refs.get("", {})
    arms = _Arms(metric)
    out = Comparisons()
    for row in rows:
        if metric not in row.entry["metrics"] or roles.get(row.method) == "bound":
            continue
        own = refs.get(row.store, {})
        bounds = own if {"public_only", "nonprivate"} <= own.keys() else primary
        low, high = bounds.get("public_only"), bounds.get("nonprivate")
        generator = own.get("generator_only", primary.get("generator_only"))
        if row.entry["method"]["name"] == "generator_only":
            generator = None
        cell = Comparison(
            arms.difference(row, low), arms.difference(row, generator), arms.gap(row, low, high)
        )
        if cell != Comparison():
            out.cells[row.method, row.epsilon_budget] = cell
    low, high = primary.get("public_only"), primary.get("nonprivate")
    if low is not None and high is not None and metric in low.entry["metrics"]:
        out.separation = _separation(arms, low, high)
    return out


def _point_only(point: float) -> Interval:
    """A difference without an interval (a row with one seed): NaN bounds."""
    return Interval(point, math.nan, math.nan, math.nan, 0.95)


def _separation(arms: _Arms, low: Row, high: Row) -> Separation | None:
    boot = arms.boot([high, low])
    if boot is None:
        interval = seed_difference(_values(high, arms.metric), _values(low, arms.metric))
        return None if interval is None else Separation(SEEDS_ONLY, interval)
    paired = boot.difference(arms.arm(high), arms.arm(low))
    unpaired = boot.difference(arms.arm(high), arms.arm(low), paired=False)
    return Separation(CLIENTS_AND_SEEDS, paired, unpaired.se)
