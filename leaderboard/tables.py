"""Paper-style tables: methods × ε for one metric, mean ± 95 % CI (over test clients and
seeds where an entry kept per-client hits, else over seeds), gap closed, and
the best *ranked* method per column in bold (bounds and controls are shown, never ranked;
a method's cell is ranked only with at least :data:`MIN_RANKED_SEEDS` seeds). Below each
next-token table, every row's paired bootstrap intervals over test clients and seeds
against public_only and generator_only, its gap closed, and the bounds' separation
(:mod:`leaderboard.comparisons`)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from benchmark.evaluation.stats import gap_closed
from benchmark.spec import PRIVACY_UNITS
from leaderboard.comparisons import (
    CLIENTS_AND_SEEDS,
    SEEDS_ONLY,
    Comparisons,
    Estimate,
    cell_intervals,
    compare,
)
from leaderboard.directions import lower_is_better
from leaderboard.entries import audit_exceeds_epsilon
from leaderboard.store import Row

DEFAULT_METRIC = "next_token.top1"
# A split leads with the first of these its entries have: next-token accuracy for text
# splits, the win rate for preference splits (paper 003), then the other tasks' measures.
HEADLINES = (
    DEFAULT_METRIC,
    "win_rate.win_rate",
    "classification.accuracy",
    "in_vocab.top1_llm_tokens",
    "mauve.mauve",
)
# Shown beside a headline, each as a table of its own: paper 003's reward accuracy reads
# the aligned policy's implicit reward on held-out human pairs, no judge in between, so a
# preference split leads with both it and the judge's win rate (issue 35).
CO_HEADLINES = {"win_rate.win_rate": ("reward_accuracy.accuracy",)}
BOUND_METHODS = {"public_only": 0.0, "nonprivate": math.inf}
ROLE_ORDER = {"bound": 0, "control": 1, "method": 2}
# A cell with fewer seeds is shown, marked, and never ranked: one seed says nothing about
# the method's own variance (issue 32).
MIN_RANKED_SEEDS = 3
# What a bound or control row is, printed beside its role.
ROW_LABELS = {
    "public_only": "ε = 0 anchor: public data only",
    "nonprivate": "ε = ∞ anchor: all private data, no noise",
    "oracle": "real private texts, release-sized, ε = ∞",
    "generator_only": "the generator from public prompts, no private signal",
    "base_model": "ε = 0 anchor: the base model",
}
METRIC_LABELS = {
    "next_token.top1": "next-token top-1",
    "win_rate.win_rate": "win rate vs test chosen",
    "reward_accuracy.accuracy": "reward accuracy",
    "classification.accuracy": "classifier accuracy on real test texts",
    "classification.macro_f1": "classifier macro-F1",
    "in_vocab.top1_llm_tokens": "in-vocabulary next-token top-1",
    "next_token.top3": "next-token top-3",
    "next_token.ce": "cross-entropy (nats)",
    "next_token.validation_top1": "validation top-1",
    "next_token.selected_epoch": "selected epoch",
    "fid.fid": "FID",
    "mauve.mauve": "MAUVE",
    "mia.loss_auc": "MIA loss AUC",
    "mia.calibrated_auc": "MIA calibrated AUC",
    "mia.reference_loss_auc": "MIA reference AUC",
    "premia.auc": "PREMIA AUC",
    "canary.epsilon_lower_bound": "canary audit ε ≥",
    "dcr.auc": "DCR AUC",
    "next_token.test_tokens": "test tokens",
    "fid.n_real": "real texts scored",
    "fid.n_synthetic": "released texts scored",
}
# Counts and chosen settings describe a run; they have no better direction.
UNDIRECTED = ("canary.epsilon_lower_bound", "next_token.selected_epoch", "next_token.test_tokens")


def headline_metric(rows: Sequence[Row], split: str) -> str:
    """The metric ``split``'s table leads with (see :data:`HEADLINES`)."""
    names = {name for r in rows if r.split == split for name in r.entry["metrics"]}
    return next((m for m in HEADLINES if m in names), DEFAULT_METRIC)


def headline_metrics(rows: Sequence[Row], split: str) -> list[str]:
    """The headline metric of ``split`` and the co-headlines (:data:`CO_HEADLINES`) its
    entries have, in the order their tables are shown."""
    first = headline_metric(rows, split)
    names = {name for r in rows if r.split == split for name in r.entry["metrics"]}
    return [first, *(m for m in CO_HEADLINES.get(first, ()) if m in names)]


def metric_label(metric: str) -> str:
    """A human column label with its direction, e.g. ``next-token top-1 ↑``."""
    label = METRIC_LABELS.get(metric, metric)
    if metric in UNDIRECTED or metric.rpartition(".")[2].startswith("n_"):
        return label
    return f"{label} {'↓' if lower_is_better(metric) else '↑'}"


def role_of(row: Row) -> str:
    """Entries from before roles existed are ranked methods unless they are the bounds."""
    name = row.entry["method"]["name"]
    return row.entry["method"].get("role", "bound" if name in BOUND_METHODS else "method")


@dataclass(frozen=True)
class Cell:
    mean: float
    ci: tuple[float, float] | None  # the 95 % interval's ends (None: one seed, no hits)
    n: int
    integer: bool = False  # every seed's value is a whole number (epochs, counts)
    basis: str = SEEDS_ONLY  # what the interval resamples (CLIENTS_AND_SEEDS: hits kept)

    @property
    def ci_half(self) -> float | None:
        return None if self.ci is None else (self.ci[1] - self.ci[0]) / 2

    @property
    def symmetric(self) -> bool:
        """Whether ``mean ± half-width`` states the interval: its two sides differ by at
        most a tenth of the half-width (a bootstrap's percentile interval need not be
        centred on the mean; a t-interval is)."""
        if self.ci is None:
            return True
        below, above = self.mean - self.ci[0], self.ci[1] - self.mean
        return abs(above - below) <= 0.1 * (above + below) / 2


@dataclass
class Table:
    split: str
    metric: str
    epsilons: list[float]
    methods: list[str]
    roles: dict[str, str]
    cells: dict[tuple[str, float], Cell]
    gap: dict[tuple[str, float], float]
    best: dict[float, str]
    # cells whose canary audit refutes the entry's ε: shown marked, never ranked best
    flagged: set[tuple[str, float]] = field(default_factory=set)
    # method cells with fewer than MIN_RANKED_SEEDS seeds: shown marked, never ranked
    few_seeds: set[tuple[str, float]] = field(default_factory=set)
    comparisons: Comparisons = field(default_factory=Comparisons)
    names: dict[str, str] = field(default_factory=dict)  # shown method → its entry's name
    apart: set[str] = field(default_factory=set)  # rows under another privacy unit

    def interval_bases(self) -> set[str]:
        """What the cells' intervals resample (cells without an interval say nothing)."""
        return {c.basis for c in self.cells.values() if c.ci_half is not None}

    def ranked(self, method: str, eps: float) -> bool:
        """Whether the cell competes for best: a method row, under the table's unit, with
        enough seeds and no refuting audit."""
        key = (method, eps)
        return (
            self.roles[method] == "method"
            and method not in self.apart
            and key not in self.few_seeds
            and key not in self.flagged
        )

    def highest(self, eps: float, counts: Callable[[str, float], bool]) -> str | None:
        """The method with the best mean at ``eps`` (by the metric's direction) among the
        rows ``counts`` admits, or None."""
        sign = -1 if lower_is_better(self.metric) else 1
        contenders = [
            (sign * self.cells[m, eps].mean, m)
            for m in self.methods
            if (m, eps) in self.cells and counts(m, eps)
        ]
        return max(contenders)[1] if contenders else None

    def to_json(self) -> dict:
        fmt = format_epsilon
        return {
            "split": self.split,
            "metric": self.metric,
            "label": metric_label(self.metric),
            "lower_is_better": lower_is_better(self.metric),
            "epsilons": [fmt(e) for e in self.epsilons],
            "rows": [
                {
                    "method": m,
                    "role": self.roles[m],
                    **{
                        f"eps={fmt(e)}": {
                            "mean": self.cells[m, e].mean,
                            "ci95_half_width": self.cells[m, e].ci_half,
                            "ci95": self.cells[m, e].ci,
                            "ci95_basis": self.cells[m, e].basis,
                            "seeds": self.cells[m, e].n,
                            "gap_closed": self.gap.get((m, e)),
                            "best": self.best.get(e) == m,
                            "audit_exceeds_epsilon": (m, e) in self.flagged,
                            "ranked": self.ranked(m, e),
                            "paired": (
                                self.comparisons.cells[m, e].to_json()
                                if (m, e) in self.comparisons.cells
                                else None
                            ),
                        }
                        for e in self.epsilons
                        if (m, e) in self.cells
                    },
                }
                for m in self.methods
            ],
            "bounds_separation": (
                self.comparisons.separation.to_json() if self.comparisons.separation else None
            ),
        }


def format_epsilon(eps: float) -> str:
    return "inf" if math.isinf(eps) else f"{eps:g}"


def cell_of(summary: dict) -> Cell:
    low, high = summary.get("ci_low"), summary.get("ci_high")
    ci = None if low is None or high is None else (low, high)
    values = summary.get("values") or [summary["mean"]]
    integer = all(float(v).is_integer() for v in values)
    return Cell(summary["mean"], ci, int(summary.get("n", 1)), integer)


def anchors_by_store(rows: Sequence[Row], metric: str) -> dict[str, tuple[float, float]]:
    """The (public_only, nonprivate) means of each store that has both bounds: a store's
    rows are placed on its own bounds' scale (a user's full suite run on their machine),
    else on the primary store's (a submission runs no bounds of its own)."""
    found: dict[str, dict[str, float]] = {}
    for row in rows:
        name = row.entry["method"]["name"]
        summary = summary_of(row.entry, metric)
        if BOUND_METHODS.get(name) == row.epsilon_budget and summary:
            found.setdefault(row.store, {})[name] = summary["mean"]
    return {
        store: (bounds["public_only"], bounds["nonprivate"])
        for store, bounds in found.items()
        if len(bounds) == 2 and bounds["public_only"] != bounds["nonprivate"]
    }


def privacy_unit(row: Row) -> str:
    return str(row.entry.get("privacy", {}).get("unit", "user"))


def apart_by_unit(rows: Sequence[Row]) -> tuple[list[Row], set[str]]:
    """Rows whose privacy unit is not the table's (the unit of most rows) are shown under
    ``name [unit]`` and never ranked: paper 001's sample-level DP per client protects less
    than user-level DP, so its numbers are not comparable with theirs (a tie goes to the unit
    :data:`~benchmark.spec.PRIVACY_UNITS` lists first, user-level). Returns the rows and
    the names of those shown apart."""
    units = Counter(privacy_unit(r) for r in rows)
    order = {u: i for i, u in enumerate(PRIVACY_UNITS)}  # ties: the unit listed first
    table_unit = min(units, key=lambda u: (-units[u], order.get(u, len(order)))) if units else ""
    shown = [
        r if privacy_unit(r) == table_unit else replace(r, method=f"{r.method} [{privacy_unit(r)}]")
        for r in rows
    ]
    return shown, {r.method for r in shown if privacy_unit(r) != table_unit}


def instruments_of(row: Row) -> frozenset[str]:
    """The digests of the start models the row's seeds were measured from (none: records
    from before the digest)."""
    return frozenset(row.entry.get("instruments", ()))


def apart_by_instrument(rows: Sequence[Row]) -> tuple[list[Row], set[str]]:
    """Rows measured with another build of the instrument than the bounds they would be
    placed against (their own store's when it has both, else the primary store's) are shown
    under ``name [other instrument]``, without gap closed or paired differences, and never
    ranked: two builds of the same recipe moved public_only by a fifth of the bench's gap
    (issue 32). Rows or bounds without a digest are placed as before. Returns the rows and
    the names of those shown apart."""
    bounds: dict[str, dict[str, frozenset[str]]] = {}
    for row in rows:
        name = row.entry["method"]["name"]
        if BOUND_METHODS.get(name) == row.epsilon_budget:
            bounds.setdefault(row.store, {})[name] = instruments_of(row)
    own = {store for store, found in bounds.items() if len(found) == len(BOUND_METHODS)}

    def other(row: Row) -> bool:
        reference = bounds.get(row.store if row.store in own else "", {})
        measured = frozenset().union(*reference.values()) if reference else frozenset()
        mine = instruments_of(row)
        return bool(mine and measured) and mine != measured

    shown = [replace(r, method=f"{r.method} [other instrument]") if other(r) else r for r in rows]
    return shown, {s.method for r, s in zip(rows, shown, strict=True) if s is not r}


def summary_of(entry: dict[str, Any], metric: str) -> dict[str, Any] | None:
    """An entry's summary of ``metric``: a utility metric, or an audit (e.g. ``premia.auc``)."""
    return entry["metrics"].get(metric) or entry.get("audit", {}).get(metric)


def build_table(
    rows: Sequence[Row], split: str, metric: str | None = None, order: Sequence[str] = ()
) -> Table:
    """The split's methods × ε table of ``metric`` (default: its headline metric). Rows go
    by role, then in ``order`` (a suite's rows, e.g. a paper's table order), then by name."""
    metric = metric or headline_metric(rows, split)
    rows = [r for r in rows if r.split == split and summary_of(r.entry, metric)]
    rows, unranked = apart_by_unit(rows)
    rows, elsewhere = apart_by_instrument(rows)
    unranked |= elsewhere
    placed = [r for r in rows if r.method not in elsewhere]
    cells = {(r.method, r.epsilon_budget): cell_of(summary_of(r.entry, metric)) for r in rows}
    for key, interval in cell_intervals(rows, metric).items():
        ends = (interval.low, interval.high)
        cells[key] = replace(cells[key], ci=ends, basis=CLIENTS_AND_SEEDS)
    roles = {r.method: role_of(r) for r in rows}
    epsilons = sorted({e for _, e in cells})
    place = {m: i for i, m in enumerate(order)}
    methods = sorted(roles, key=lambda m: (ROLE_ORDER[roles[m]], place.get(m, len(place)), m))
    anchors = anchors_by_store(rows, metric)
    gap = {
        (r.method, r.epsilon_budget): gap_closed(cells[r.method, r.epsilon_budget].mean, *scale)
        for r in placed
        if (scale := anchors.get(r.store, anchors.get("")))
    }
    flagged = {(r.method, r.epsilon_budget) for r in rows if audit_exceeds_epsilon(r.entry)}
    few_seeds = {
        key
        for key, cell in cells.items()
        if roles[key[0]] == "method" and cell.n < MIN_RANKED_SEEDS
    }
    names = {r.method: r.entry["method"]["name"] for r in rows}
    table = Table(
        split, metric, epsilons, methods, roles, cells, gap, {}, flagged, few_seeds,
        compare(placed, metric, roles), names, unranked,
    )  # fmt: skip
    for eps in epsilons:
        best = table.highest(eps, table.ranked)
        if best is not None:
            table.best[eps] = best
    return table


def format_cell(cell: Cell, digits: int = 4) -> str:
    """``mean ± half-width``, or ``mean +above/-below`` where the interval is not centred
    on the mean; whole-number quantities (epochs, counts) without decimals."""
    if cell.integer:
        digits = 0 if float(cell.mean).is_integer() and not cell.ci_half else 1
    text = f"{cell.mean:,.{digits}f}" if cell.integer else f"{cell.mean:.{digits}f}"
    if cell.ci is None:
        return text
    if cell.symmetric:
        return text + f" ± {cell.ci_half:.{digits}f}"
    low, high = cell.ci
    return text + f" +{high - cell.mean:.{digits}f}/-{cell.mean - low:.{digits}f}"


def format_table_cell(table: Table, key: tuple[str, float]) -> str:
    """A cell as its table shows it: :func:`format_cell`, marked ``*`` when its interval is
    over seeds only beside cells whose intervals count test clients too."""
    cell = table.cells[key]
    mixed = len(table.interval_bases()) > 1
    seeds_only = mixed and cell.basis == SEEDS_ONLY and cell.ci_half is not None
    return format_cell(cell) + (" *" if seeds_only else "")


def format_share(share: float) -> str:
    """A gap-closed share as a whole percentage (``+ 0`` turns ``-0`` into ``0``)."""
    return f"{round(100 * share) + 0:.0f}%"


BOLD = ("\033[1m", "\033[0m")  # a terminal's bold: invisible, so no part of a column's width
BEST = ("", " [best]")  # piped output's mark: a word, never the seeds-only intervals' ``*``


def render_text(table: Table, bold: tuple[str, str] = BOLD) -> str:
    """A fixed-width table: mean ± 95 % CI half-width (n seeds) and gap closed per cell;
    ``bold`` wraps the best ranked method of each ε column (:data:`BOLD` on a terminal,
    else :data:`BEST`)."""
    header = ["method", "role"] + [f"ε={format_epsilon(e)}" for e in table.epsilons]
    lines = []
    for method in table.methods:
        cells = [method, table.roles[method]]
        for eps in table.epsilons:
            if (method, eps) not in table.cells:
                cells.append("")
                continue
            cell = table.cells[method, eps]
            text = f"{format_table_cell(table, (method, eps))} (n={cell.n})"
            if (method, eps) in table.gap and table.roles[method] != "bound":
                text += f" gap {format_share(table.gap[method, eps])}"
            if (method, eps) in table.flagged:
                text += " [audit refutes the ledger's ε]"
            if (method, eps) in table.few_seeds:
                text += f" [unranked: < {MIN_RANKED_SEEDS} seeds]"
            if table.best.get(eps) == method:
                text = f"{bold[0]}{text}{bold[1]}"
            cells.append(text)
        lines.append(cells)
    out = [f"{table.split} — {metric_label(table.metric)} ({columns_note(table)})"]
    out += _aligned([header, *lines])
    out += [  # a reference row's meaning (a suite's own rows are described by its track)
        f"  {m}: {role_label(table, m)}"
        for m in table.methods
        if table.roles[m] != "method" and table.names.get(m, m) in ROW_LABELS
    ]
    return "\n".join(out + render_comparisons(table))


def interval_note(table: Table) -> str:
    """What the cells' intervals resample: test clients and seeds where the entries kept
    per-client hits, else seeds only (marked where a table has both)."""
    bases = table.interval_bases()
    if bases == {CLIENTS_AND_SEEDS}:
        note = "mean ± 95% CI half-width over test clients and n seeds"
    elif CLIENTS_AND_SEEDS in bases:
        note = "mean ± 95% CI half-width over test clients and n seeds (* over seeds only)"
    else:
        note = "mean ± 95% CI half-width over n seeds"
    if not all(c.symmetric for c in table.cells.values()):
        note += ", +above/-below where the interval is not centred on the mean"
    return note


def columns_note(table: Table) -> str:
    """What the table's cells are, naming only what this table has: the gap closed where
    the track has both bounds, else the reference rows its methods are read against (e.g.
    the base model on the preference track)."""
    parts = [interval_note(table)]
    if table.gap:
        parts.append("gap closed = share of public_only → nonprivate")
    references = [m for m in table.methods if table.roles[m] != "method"]
    if references and not table.gap:
        parts.append(
            "no public_only → nonprivate bounds here: read methods against " + ", ".join(references)
        )
    parts.append(f"a method is ranked with ≥ {MIN_RANKED_SEEDS} seeds")
    return "; ".join(parts)


def _aligned(rows: list[list[str]]) -> list[str]:
    visible = [[c.replace(BOLD[0], "").replace(BOLD[1], "") for c in row] for row in rows]
    widths = [max(len(r[i]) for r in visible) for i in range(len(rows[0]))]
    return [
        "  ".join(c + " " * (w - len(v)) for c, v, w in zip(raw, vis, widths, strict=True))
        for raw, vis in zip(rows, visible, strict=True)
    ]


def role_label(table: Table, method: str) -> str:
    """``bound``/``control`` with what the row is (e.g. ``bound: ε = 0 anchor: ...``): for
    the rows :data:`ROW_LABELS` describes."""
    return f"{table.roles[method]}: {ROW_LABELS[table.names.get(method, method)]}"


MARKS_OF_DIFFERENCES = (
    "* = not both rows kept per-client hits over ≥ 2 seeds: a Welch t over seeds only, test "
    "sampling not counted; no CI = a row with one seed, or seeds that agree"
)


def format_interval(estimate: Estimate | None, share: bool = False) -> str:
    """``+0.0021 [-0.0010, +0.0052]`` (gap closed in percent), ``*`` when over seeds only."""
    if estimate is None:
        return ""
    i = estimate.interval
    mark = "" if estimate.basis == CLIENTS_AND_SEEDS else " *"
    if math.isnan(i.low):
        text = format_share(i.point) if share else f"{i.point:+.4f}"
        return text + " [no CI]" + mark
    if share:
        text = f"{format_share(i.point)} [{format_share(i.low)}, {format_share(i.high)}]"
    else:
        text = f"{i.point:+.4f} [{i.low:+.4f}, {i.high:+.4f}]"
    return text + mark


def render_comparisons(table: Table) -> list[str]:
    """The paired bootstrap block under a next-token table (nothing for other metrics)."""
    comparisons = table.comparisons
    if not comparisons.cells and comparisons.separation is None:
        return []
    header = ["method", "ε", "seeds", "− public_only", "− generator_only", "gap closed"]
    lines = []
    for method in table.methods:
        for eps in table.epsilons:
            cell = comparisons.cells.get((method, eps))
            if cell is None:
                continue
            n = table.cells[method, eps].n
            ranked = "" if (method, eps) not in table.few_seeds else " (unranked)"
            lines.append([
                method, format_epsilon(eps), f"{n}{ranked}",
                format_interval(cell.vs_public), format_interval(cell.vs_generator),
                format_interval(cell.gap, share=True),
            ])  # fmt: skip
    out = [
        "",
        "differences, paired 95% bootstrap CIs over test clients and seeds "
        f"(the same resampled clients for both rows; {MARKS_OF_DIFFERENCES})",
    ]
    if lines:
        out += _aligned([header, *lines])
    sep = comparisons.separation
    if sep is not None:
        d = sep.difference
        text = (
            f"bounds: nonprivate − public_only = {d.point:+.4f} [{d.low:+.4f}, {d.high:+.4f}], "
            f"SE {d.se:.4f}: {sep.ses_apart:.1f} SEs apart"
        )
        if sep.basis == CLIENTS_AND_SEEDS:
            text += " paired (test clients resampled, each row's seed error drawn)"
            if sep.unpaired_se:
                text += f"; unpaired SE {sep.unpaired_se:.4f}: {d.point / sep.unpaired_se:.1f}"
        else:
            text += " over seeds only * (test sampling not counted)"
        out.append(text)
    return out
