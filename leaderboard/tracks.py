"""The leaderboard's tracks: one per suite that publishes, each said in words.

A track is a suite's table: which stored leaderboard version holds it is read from the
store (the version's source and its metric and downstream definitions are the suite's,
:func:`suite_of`), its newest such version is the one shown, and what it measures, its
split and its privacy unit are described for a reader who does not know the hashes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmark.evaluation.stats import summarize
from benchmark.split_manifest import unit_statement
from leaderboard.catalog import SUITES
from leaderboard.comparisons import CLIENTS_AND_SEEDS, SEEDS_ONLY, client_difference
from leaderboard.store import MANIFESTS_DIR, VERSION_FILE, Row, labelled, rows_by_version
from leaderboard.suites import Suite
from leaderboard.tables import (
    BEST,
    build_table,
    format_epsilon,
    headline_metrics,
    render_text,
    summary_of,
)


@dataclass(frozen=True)
class Track:
    suite: str  # the suite whose runs fill the track
    title: str
    measures: str  # what the headline column measures, in words


# In the order ``leaderboard show`` and the site's index list them: the benchmark first,
# the quick smoke test last.
TRACKS = (
    Track(
        "bench",
        "Text benchmark",
        "next-token accuracy on real test text of the on-device LM trained on each private "
        "release (a synthetic text set or a model), between the ε = 0 and ε = ∞ bounds",
    ),
    Track(
        "bench_paper000",
        "Text benchmark under paper 000's protocol (side table)",
        "the text benchmark's split and metric, with every release fine-tuned from the "
        "generic on-device LM: the ε = 0 row is that checkpoint, untouched",
    ),
    Track(
        "prefs",
        "Preference track (paper 003)",
        "win rate of each aligned policy's replies against the test tuples' chosen replies "
        "(offline judge), beside the untouched base model",
    ),
    Track(
        "paper001",
        "Paper 001: two-stage control-code generation (fed_ctg)",
        "accuracy on real test texts of a topic classifier trained on each release's "
        "labelled synthetic texts, per variant of the paper's table",
    ),
    Track(
        "paper002",
        "Paper 002: DP-FTRL with public pre-/mid-training (dp_ftrl_dm, Table 2)",
        "in-vocabulary next-token accuracy of the federated small LM per public-training "
        "row, every client of the run taking part once (the train people less the "
        "audit's held-out canaries)",
    ),
    Track(
        "quick",
        "Quick smoke test (make run)",
        "the whole pipeline at smoke-test sizes on the KJV demo corpus: next-token "
        "accuracy, not a benchmark",
    ),
)


def _signature(source: str, metrics: Sequence[dict[str, Any]], downstream: dict) -> tuple:
    """What makes a version a suite's: its source and its metric and downstream
    definitions (the split's hash changes with its build; these fix comparability)."""
    metric_defs = sorted(json.dumps(m, sort_keys=True) for m in metrics)
    return source, tuple(metric_defs), json.dumps(downstream, sort_keys=True)


def _suite_signature(suite: Suite) -> tuple:
    return _signature(suite.source, suite.metrics, suite.downstream)


def manifests(root: Path, version: str) -> list[dict[str, Any]]:
    """The split manifests a version keeps."""
    return [
        json.loads(p.read_text()) for p in sorted((root / version / MANIFESTS_DIR).glob("*.json"))
    ]


def suite_of(root: Path, version: str) -> str | None:
    """The suite (of :data:`TRACKS`) whose definition ``version`` has, if any."""
    path = root / version / VERSION_FILE
    found = manifests(root, version)
    if not path.exists() or len(found) != 1:
        return None
    definition = json.loads(path.read_text())
    source = found[0].get("source", {}).get("name", "")
    metrics = [json.loads(m) for m in definition.get("metrics", [])]
    signature = _signature(source, metrics, definition.get("downstream", {}))
    return next((t.suite for t in TRACKS if _suite_signature(SUITES[t.suite]) == signature), None)


@dataclass(frozen=True)
class TrackView:
    """A track with its newest stored version (None: not yet run under its suite)."""

    track: Track
    version: str | None
    rows: list[Row]
    manifest: dict[str, Any]

    @property
    def split(self) -> str | None:
        return self.manifest.get("name")

    def split_words(self) -> str:
        """The split as a reader knows it: source and clients per part."""
        counts = self.manifest.get("counts", {})
        parts = ", ".join(
            f"{counts[p]['clients']:,} {p}" for p in ("train", "validation", "test") if p in counts
        )
        source = self.manifest.get("source", {}).get("name", "?")
        return f"{source}: {parts} clients" if parts else source

    def units(self) -> list[str]:
        """Each privacy unit of the track's rows in words, as its entries state it (older
        entries: as the split's manifest says; see :func:`unit_statement`); a version with
        no entries yet: as its split's manifest states it."""
        if not self.rows:
            statement = self.manifest.get("privacy_unit", {}).get("statement")
            return [statement] if statement else []
        stated = {
            r.entry["privacy"].get("unit_statement")
            or unit_statement(self.manifest, r.entry["privacy"]["unit"])
            for r in self.rows
        }
        return sorted(stated)

    def summary(self) -> str:
        """What the track measures, its split in words and its privacy unit."""
        suite = SUITES[self.track.suite]
        if self.version is None:
            return (
                f"{self.track.measures}. Not yet run under the suite "
                f"(`fedsynth suite run {suite.name}`; source {suite.source})."
            )
        pending = "" if self.rows else f" No entries yet under this version ({self.version})."
        return (
            f"{self.track.measures}. Split: {self.split_words()} ({self.split}). "
            f"Privacy unit: {'; '.join(self.units()) or 'not stated'}.{pending}"
        )

    def description(self) -> str:
        """One line: the track's name and :meth:`summary`."""
        return f"{self.track.title}: {self.summary()}"


def track_views(root: Path, grouped: dict[str, list[Row]]) -> list[TrackView]:
    """Every track with its newest version among ``grouped`` (version → rows, oldest
    first, as :func:`leaderboard.store.rows_by_version` gives them)."""
    newest: dict[str, str] = {}
    for version in grouped:
        suite = suite_of(root, version)
        if suite is not None:
            newest[suite] = version
    views = []
    for track in TRACKS:
        version = newest.get(track.suite)
        found = manifests(root, version) if version else []
        rows = grouped.get(version, []) if version else []
        views.append(TrackView(track, version, rows, found[0] if found else {}))
    return views


@dataclass(frozen=True)
class Contrast:
    name: str
    minuend: str
    subtrahend: str
    epsilon: float  # the minuend's budget
    difference: float
    ci_half: float | None  # 95 % (None: one seed and no per-client hits)
    seeds: tuple[int, int]  # the minuend's and the subtrahend's (paired by seed: both shared)
    basis: str = SEEDS_ONLY  # CLIENTS_AND_SEEDS: both rows kept per-tuple hits


def contrasts(suite: Suite, rows: Sequence[Row], metric: str) -> list[Contrast]:
    """The suite's named differences of two rows (paper 001's stage 1 effect, a preference
    policy against the base model), one per budget of the minuend. Where both entries kept
    per-client hits of the same test clients, the interval is the paired bootstrap over
    test clients and seeds (:func:`~leaderboard.comparisons.client_difference`); else it is
    paired by seed (the same split, seed and test texts for both rows: a t-interval of the
    per-seed differences, test sampling shared, not resampled). The subtrahend is its row
    at the minuend's budget, else its ε = 0 row (a reference that used no private data,
    such as the base model); two rows at different budgets are never paired."""
    by_method: dict[str, dict[float, Row]] = {}
    for r in rows:
        by_method.setdefault(r.method, {})[r.epsilon_budget] = r
    found = []
    for name, (minuend, subtrahend) in suite.contrasts.items():
        references = by_method.get(subtrahend, {})
        for eps, row in sorted(by_method.get(minuend, {}).items()):
            reference = references.get(eps, references.get(0.0))
            if reference is None:
                continue
            a, b = _per_seed(row.entry, metric), _per_seed(reference.entry, metric)
            shared = sorted(set(a) & set(b))
            if not shared:
                continue
            resampled = client_difference(row, reference, metric)
            if resampled is not None:
                half = (resampled.high - resampled.low) / 2
                seeds, basis, point = (len(a), len(b)), CLIENTS_AND_SEEDS, resampled.point
            else:
                paired = summarize([a[s] - b[s] for s in shared])
                half = None if paired.ci_high is None else (paired.ci_high - paired.ci_low) / 2
                seeds, basis, point = (paired.n, paired.n), SEEDS_ONLY, paired.mean
            found.append(Contrast(name, minuend, subtrahend, eps, point, half, seeds, basis))
    return found


def _per_seed(entry: dict[str, Any], metric: str) -> dict[int, float]:
    summary = summary_of(entry, metric) or {}
    return dict(zip(entry["spec"].get("seeds", []), summary.get("values", []), strict=False))


def format_contrast(c: Contrast) -> str:
    ci = f" ± {c.ci_half:.4f}" if c.ci_half is not None else " (one seed: no CI)"
    difference = round(c.difference, 4) + 0.0  # no "-0.0000" for a float's rounding error
    first, second = c.seeds
    seeds = (
        f"{first} and {second} seeds" if first != second else f"{first} seed" + "s" * (first > 1)
    )
    how = (
        f"paired 95% bootstrap over test clients and {seeds}"
        if c.basis == CLIENTS_AND_SEEDS
        else f"paired by seed, 95% t over {seeds}"
    )
    return (
        f"{c.name} at ε={format_epsilon(c.epsilon)}: {c.minuend} − {c.subtrahend} = "
        f"{difference:+.4f}{ci} ({how})"
    )


def grouped_rows(root: Path, others: dict[str, Path] | None = None) -> dict[str, list[Row]]:
    """Every version's rows (oldest first) of ``root``, with the same versions' rows of
    each other store (label → root, e.g. your own runs) labelled beside them."""
    grouped = rows_by_version(root) if root.exists() else {}
    for label, other in (others or {}).items():
        if other.exists() and other.resolve() != root.resolve():
            for version, rows in rows_by_version(other).items():
                grouped.setdefault(version, []).extend(labelled(rows, label))
    return grouped


def render_tracks(
    views: Sequence[TrackView],
    metric: str | None = None,
    epsilon: float | None = None,
    bold: tuple[str, str] = BEST,
) -> str:
    """Every track's headline table, and its co-headline tables (the preference track's
    reward accuracy), under its one-line description (``leaderboard show`` with no version
    or split); a track not yet run says so."""
    out = []
    for view in views:
        out += ["", f"== {view.description()}"]
        rows = [
            r for r in view.rows if epsilon is None or r.epsilon_budget in (epsilon, 0.0, math.inf)
        ]
        if not rows:
            continue
        out.append(f"leaderboard {view.version}")
        suite = SUITES[view.track.suite]
        for split in sorted({r.split for r in rows}):
            split_rows = [r for r in rows if r.split == split]
            # the headline, then its co-headlines (e.g. reward accuracy beside the win rate)
            shown = [metric] if metric else headline_metrics(rows, split)
            for position, shown_metric in enumerate(shown):
                table = build_table(rows, split, shown_metric, order=suite.methods)
                if not table.methods:
                    continue
                out.append(render_text(table, bold))
                if position == 0:  # the rows' descriptions, once
                    out += [
                        f"  {m}: {suite.variants[m].description}"
                        for m in table.methods
                        if m in suite.variants and suite.variants[m].description
                    ]
                out += [format_contrast(c) for c in contrasts(suite, split_rows, table.metric)]
    return "\n".join(out).lstrip("\n")
