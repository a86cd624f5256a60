"""The static leaderboard site: one sortable table per split, privacy–utility plots, and
every row linked to its entry JSON. Plain HTML + a few lines of JS; no network needed.

Every string that reaches the page comes from entries, manifests or directory names, which
submissions and anyone with write access to a store control, so each one is escaped where
it is written (text and attributes: :func:`_text`; link targets: :func:`_href`).
"""

from __future__ import annotations

import html
import json
import math
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from leaderboard.catalog import SUITES
from leaderboard.directions import lower_is_better
from leaderboard.entries import audit_exceeds_epsilon
from leaderboard.store import MANIFESTS_DIR, Row
from leaderboard.tables import (
    MARKS_OF_DIFFERENCES,
    MIN_RANKED_SEEDS,
    ROLE_ORDER,
    ROW_LABELS,
    Cell,
    Table,
    apart_by_instrument,
    apart_by_unit,
    build_table,
    cell_of,
    format_cell,
    format_epsilon,
    format_interval,
    format_share,
    format_table_cell,
    headline_metrics,
    metric_label,
    role_of,
)
from leaderboard.tracks import (
    Track,
    TrackView,
    contrasts,
    format_contrast,
    grouped_rows,
    track_views,
)

SORT_JS = """
document.querySelectorAll('table.sortable').forEach(table => {
  table.querySelectorAll('th').forEach((th, col) => {
    th.addEventListener('click', () => {
      const body = table.tBodies[0];
      const asc = th.dataset.dir !== 'asc';
      table.querySelectorAll('th').forEach(h => delete h.dataset.dir);
      th.dataset.dir = asc ? 'asc' : 'desc';
      const key = td => { const v = td.dataset.value ?? td.textContent;
                          const n = parseFloat(v); return isNaN(n) ? v : n; };
      const rows = Array.from(body.rows).sort((a, b) => {
        const x = key(a.cells[col]), y = key(b.cells[col]);
        return (x < y ? -1 : x > y ? 1 : 0) * (asc ? 1 : -1);
      });
      rows.forEach(r => body.appendChild(r));
    });
  });
});
"""

STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:1em 0}th,td{border:1px solid #ccc;padding:4px 8px}
th{cursor:pointer;background:#f3f3f3}th[data-dir=asc]::after{content:' ▲'}
th[data-dir=desc]::after{content:' ▼'}td.num{text-align:right;font-variant-numeric:tabular-nums}
svg{border:1px solid #ddd;background:#fff}p.split{max-width:70em;color:#444}
.badge{font-size:75%;padding:1px 5px;border-radius:3px;background:#eee;color:#555}
.badge.control{background:#fdf1d6}.badge.bound{background:#e4eefb}.badge.unranked{background:#f3e3f3}
.hash{font-size:70%;color:#888;font-weight:normal}table.tracks td{vertical-align:top}
tr.best td{font-weight:bold}tr.bound td,tr.control td{color:#555}tr.theirs td{background:#f7fbf2}tr.flagged td{background:#fde8e8}
"""

# matplotlib's tab10: ten distinguishable hues (the cpu suites plot nine series).
PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
)  # fmt: skip


# Each audit column names its metric, then the alternatives that fill it for an entry
# without it: a preference policy's PREMIA AUC is its membership-inference AUC.
AUDIT_COLUMNS = (
    ("mia.loss_auc", "premia.auc"),
    ("mia.reference_loss_auc",),
    ("dcr.auc",),
    ("canary.epsilon_lower_bound",),
)
ROLE_BADGE = {"bound": "bound", "control": "control", "method": ""}


def _text(value: object) -> str:
    """Any value as HTML text or a quoted attribute value (quotes escaped too)."""
    return html.escape(str(value), quote=True)


def _href(target: str) -> str:
    """A relative link target: percent-encoded but for the characters of plain file names
    (so it stays a path, never a scheme or a second attribute) and escaped."""
    return _text(quote(target, safe="/@+"))


def _num(value: float | None, text: str) -> str:
    data = "" if value is None else repr(1e308 if math.isinf(value) else value)
    return f'<td class="num" data-value="{_text(data)}">{_text(text)}</td>'


def _summary_cell(summary: dict | None, digits: int = 4) -> str:
    if summary is None:
        return _num(None, "")
    return _num(summary["mean"], format_cell(cell_of(summary), digits))


def _split_header(split: str, manifest: dict | None) -> str:
    """Source, clients per part and the date window: what the split *is*, not only its hash."""
    if not manifest:
        return f'<h2 id="split-{html.escape(split)}">{html.escape(split)}</h2>'
    name = manifest.get("source", {}).get("name", "?")
    title = (
        f'<h2 id="split-{html.escape(split)}">{html.escape(str(name))} split '
        f'<span class="hash">{html.escape(split)}</span></h2>'
    )
    counts = manifest.get("counts", {})
    parts = ", ".join(
        f"{counts[p]['clients']:,} {p} clients / {counts[p]['samples']:,} samples"
        for p in ("train", "validation", "test", "public")
        if p in counts
    )
    window = manifest.get("filters", {}).get("date_window", {})
    dates = (
        f"private window {window.get('start') or '…'} to {window.get('end') or '…'} "
        f"on {window.get('field')}"
        if window.get("start") or window.get("end")
        else "no date window"
    )
    public = manifest.get("public", {})
    public_rule = f"public part: {public.get('rule', '?')}" + (
        f" (at most {public['max']:,} samples)" if public.get("max") else ""
    )
    source = manifest.get("source", {})
    demo = " — demo corpus: public models have seen it" if manifest.get("demo") else ""
    return (
        f"{title}<p class='split'><b>{html.escape(str(source.get('name', '?')))}</b> "
        f"({html.escape(str(source.get('revision', '')))}): "
        f"{html.escape(str(source.get('description', '')))}. {html.escape(parts)}; "
        f"{html.escape(dates)}; {html.escape(public_rule)}"
        f"{html.escape(demo)}. Content hash {html.escape(manifest.get('content_hash', '')[:12])}.</p>"
    )


def _method_cell(row: Row, unranked: bool = False) -> str:
    """The method's name, its role badge with what a bound or control row is (e.g. the
    ε = 0 anchor), and a mark on a method cell shown but not ranked (too few seeds)."""
    role = role_of(row)
    what = ROW_LABELS.get(row.entry["method"]["name"], "") if role != "method" else ""
    label = f"{role}: {what}" if what else role
    badge = f' <span class="badge {_text(role)}">{_text(label)}</span>' if ROLE_BADGE[role] else ""
    if unranked:
        badge += f' <span class="badge unranked">unranked: &lt; {MIN_RANKED_SEEDS} seeds</span>'
    return f'<td data-value="{_text(row.method)}">{_text(row.method)}{badge}</td>'


def _eps_cell(eps: float) -> str:
    return _num(eps, format_epsilon(eps))


def _row_class(row: Row, best: bool = False) -> str:
    """Role, best ranked cell, and rows from a store beside the primary one (yours)."""
    classes = [role_of(row), *(["best"] if best else []), *(["theirs"] if row.store else [])]
    return _text(" ".join(classes))


def _headline_table(split: str, rows: Sequence[Row], metric: str, links: dict[str, str]) -> str:
    """What a reader came for: the headline metric with its CI and the gap it closes."""
    table = build_table(rows, split, metric)
    rows, _ = apart_by_unit([r for r in rows if r.split == split])  # names as in the table
    rows, _ = apart_by_instrument(rows)
    # Only the columns this table has: a track without the public_only → nonprivate bounds
    # (the preference track) has no gap closed and no paired differences from them.
    gap_column = bool(table.gap)
    paired_columns = bool(table.comparisons.cells)
    head = ["method", "ε", metric_label(metric) + " (mean ± 95% CI)"]
    head += ["gap closed"] * gap_column + ["seeds"]
    if paired_columns:
        head += ["− public_only (paired 95% CI)", "− generator_only (paired 95% CI)"]
        head += ["gap closed (paired 95% CI)"]
    sign = 1 if lower_is_better(metric) else -1

    def rank(row: Row) -> tuple:
        """Bounds, then the control, then the ranked methods per ε, best first."""
        summary = row.entry["metrics"].get(metric)
        score = sign * summary["mean"] if summary else math.inf
        return ROLE_ORDER[role_of(row)], row.epsilon_budget, score, row.method

    body = []
    for row in sorted(rows, key=rank):
        gap = table.gap.get((row.method, row.epsilon_budget))
        key = (row.method, row.epsilon_budget)
        best = table.best.get(row.epsilon_budget) == row.method
        paired = table.comparisons.cells.get(key)
        body.append(
            f"<tr class='{_row_class(row, best)}'>"
            + _method_cell(row, key in table.few_seeds)
            + _eps_cell(row.epsilon_budget)
            + (
                _num(table.cells[key].mean, format_table_cell(table, key))
                if key in table.cells
                else _num(None, "")
            )
            + (_num(gap, "" if gap is None else format_share(gap)) if gap_column else "")
            + _num(
                len(row.entry["spec"].get("seeds", [])),
                str(len(row.entry["spec"].get("seeds", []))),
            )
            + "".join(
                _estimate_cell(getattr(paired, name, None), name == "gap")
                for name in ("vs_public", "vs_generator", "gap")
                if paired_columns
            )
            + f'<td><a href="{_href(links[_record_name(row)])}">json</a></td></tr>'
        )
    cols = "".join(f"<th>{html.escape(h)}</th>" for h in [*head, "record"])
    return (
        f'<table class="sortable headline" data-split="{html.escape(split)}">'
        f"<thead><tr>{cols}</tr></thead><tbody>{''.join(body)}</tbody></table>"
        + _separation_note(table)
    )


def _contrasts(track: Track | None, rows: Sequence[Row], metric: str) -> str:
    """The track's named paired differences (paper 001's stage 1 effect, a preference
    policy against the base model) under ``metric``'s table, if it has them."""
    if track is None:
        return ""
    found = contrasts(SUITES[track.suite], rows, metric)
    return "".join(f"<p class='contrast'>{_text(format_contrast(c))}</p>" for c in found)


def _estimate_cell(estimate: Any, share: bool) -> str:
    return _num(
        None if estimate is None else estimate.interval.point, format_interval(estimate, share)
    )


def _separation_note(table: Table) -> str:
    """How the paired intervals were made, and how far apart the bounds are in SEs."""
    if not table.comparisons.cells and table.comparisons.separation is None:
        return ""
    note = (
        "Paired intervals: the test clients are resampled once per bootstrap replicate for "
        f"both rows of a difference, the seeds per row. {MARKS_OF_DIFFERENCES}."
    )
    sep = table.comparisons.separation
    if sep is not None:
        d = sep.difference
        note += (
            f" Bounds: nonprivate − public_only = {d.point:+.4f} [{d.low:+.4f}, {d.high:+.4f}], "
            f"{sep.ses_apart:.1f} SEs apart "
            + ("(paired, test clients and seeds)" if sep.unpaired_se else "(over seeds only *)")
            + (f"; unpaired {d.point / sep.unpaired_se:.1f}." if sep.unpaired_se else ".")
        )
    return f"<p class='paired'>{html.escape(note)}</p>"


def _audit_table(split: str, rows: Sequence[Row]) -> str:
    """Audits (membership inference, distance to closest record) and costs, apart."""
    head = ["method", "ε", "ε from ledger", *(metric_label(c[0]) for c in AUDIT_COLUMNS)]
    head += ["flag", "floats up / client-round", "run seconds / seed"]
    body = []
    for row in sorted(rows, key=lambda r: (ROLE_ORDER[role_of(r)], r.method, r.epsilon_budget)):
        seeds = max(len(row.entry["spec"].get("seeds", [])), 1)
        floats = row.entry["costs"].get("floats_up_per_client_round")
        flagged = audit_exceeds_epsilon(row.entry)
        body.append(
            f"<tr class='{_row_class(row)}{' flagged' if flagged else ''}'>"
            + _method_cell(row)
            + _eps_cell(row.epsilon_budget)
            + _eps_cell(row.epsilon)
            + "".join(_summary_cell(_audit_of(row, c), 3) for c in AUDIT_COLUMNS)
            + ("<td class='flag'>audit refutes the ledger's ε</td>" if flagged else "<td></td>")
            + _num(floats, "" if floats is None else f"{floats:,.0f}")
            + _num(row.entry["wall_seconds"] / seeds, f"{row.entry['wall_seconds'] / seeds:,.0f}")
            + "</tr>"
        )
    cols = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    return (
        f'<details><summary>Audits and costs</summary><table class="sortable audit" '
        f'data-split="{html.escape(split)}"><thead><tr>{cols}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></details>"
    )


def _audit_of(row: Row, column: tuple[str, ...]) -> Any:
    """The entry's summary for the first of ``column``'s metrics that it has."""
    audits = row.entry["audit"]
    return next((audits[m] for m in column if m in audits), None)


def _ticks(low: float, high: float, count: int = 5) -> list[float]:
    """About ``count`` round values spanning [low, high] (1-2-5 steps)."""
    raw = (high - low) / max(count - 1, 1) or abs(high) or 1.0
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    first = math.ceil(low / step) * step
    return [first + i * step for i in range(int((high - first) / step + 1e-9) + 1)]


def _plot(split: str, rows: Sequence[Row], metric: str) -> str:
    """Privacy–utility: the metric against ε per ranked method (log ε axis) with 95% CI
    error bars; bounds and the control are dashed horizontal reference lines (their ε is
    0 or ∞, off a log axis), named in the legend with their role."""
    points: dict[str, list[tuple[float, Cell]]] = {}
    roles = {}
    for row in rows:
        if metric in row.entry["metrics"]:
            points.setdefault(row.method, []).append(
                (row.epsilon_budget, cell_of(row.entry["metrics"][metric]))
            )
            roles[row.method] = role_of(row)
    finite = sorted({e for pts in points.values() for e, _ in pts if 0 < e < math.inf})
    spans = [c.ci or (c.mean, c.mean) for pts in points.values() for _, c in pts]
    if not spans or not finite:
        return ""
    w, h, pad, left = 560, 320, 40, 60
    lo_e, hi_e = math.log10(min(finite)) - 0.5, math.log10(max(finite)) + 0.5
    lo_v, hi_v = min(a for a, _ in spans), max(b for _, b in spans)
    margin = 0.05 * ((hi_v - lo_v) or abs(hi_v) or 1.0)
    lo_v, hi_v = lo_v - margin, hi_v + margin
    x = lambda e: left + (math.log10(e) - lo_e) / (hi_e - lo_e) * (w - left - pad)  # noqa: E731
    y = lambda v: h - pad - (v - lo_v) / (hi_v - lo_v) * (h - 2 * pad)  # noqa: E731
    parts = [f'<line x1="{left}" y1="{h - pad}" x2="{w - pad}" y2="{h - pad}" stroke="#999"/>']
    for e in finite:
        parts.append(
            f'<text x="{x(e):.1f}" y="{h - pad + 16}" font-size="11" text-anchor="middle">{format_epsilon(e)}</text>'
        )
    parts.append(f'<text x="{w / 2}" y="{h - 6}" font-size="12" text-anchor="middle">ε</text>')
    parts.append(
        f'<text x="{left}" y="{pad - 16}" font-size="12">{html.escape(metric_label(metric))}</text>'
    )
    for v in _ticks(lo_v, hi_v):
        parts.append(
            f'<line x1="{left}" x2="{w - pad}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#eee"/>'
            f'<text x="{left - 6}" y="{y(v) + 4:.1f}" font-size="10" text-anchor="end">{v:.4g}</text>'
        )
    order = sorted(points, key=lambda m: (ROLE_ORDER[roles[m]], m))
    for i, method in enumerate(order):
        pts, color = points[method], PALETTE[i % len(PALETTE)]
        dash = ' stroke-dasharray="5 3"' if roles[method] != "method" else ""
        if dash:
            level = y(pts[0][1].mean)
            parts.append(
                f'<line class="reference" x1="{left}" x2="{w - pad}" y1="{level:.1f}" y2="{level:.1f}" stroke="{color}"{dash}/>'
            )
        else:
            pts = sorted((p for p in pts if 0 < p[0] < math.inf), key=lambda p: p[0])
            path = " ".join(f"{x(e):.1f},{y(c.mean):.1f}" for e, c in pts)
            parts.append(f'<polyline points="{path}" fill="none" stroke="{color}"/>')
            for e, c in pts:
                parts.append(f'<circle cx="{x(e):.1f}" cy="{y(c.mean):.1f}" r="3" fill="{color}"/>')
                if c.ci_half:
                    parts.append(
                        f'<line class="errorbar" x1="{x(e):.1f}" x2="{x(e):.1f}" y1="{y(c.ci[0]):.1f}" y2="{y(c.ci[1]):.1f}" stroke="{color}"/>'
                    )
        role = "" if roles[method] == "method" else f" ({roles[method]})"
        ly = pad + 16 * i
        parts.append(
            f'<line x1="{w - pad + 8}" x2="{w - pad + 28}" y1="{ly - 4}" y2="{ly - 4}" stroke="{color}" stroke-width="2"{dash}/>'
            f'<text x="{w - pad + 32}" y="{ly}" font-size="11">{html.escape(method + role)}</text>'
        )
    return f'<svg class="plot" width="{w + 200}" height="{h}" data-split="{html.escape(split)}">{"".join(parts)}</svg>'


def _page(
    rows: Sequence[Row],
    version: str,
    links: dict[str, str],
    nav: str,
    metric: str | None,
    manifests: dict[str, dict],
    track: Track | None = None,
) -> str:
    sections = []
    for split in sorted({r.split for r in rows}):
        split_rows = [r for r in rows if r.split == split]
        shown = [metric] if metric else headline_metrics(split_rows, split)
        sections.append(
            _split_header(split, manifests.get(split))
            + "".join(
                _headline_table(split, split_rows, m, links)
                + _plot(split, split_rows, m)
                + _contrasts(track, split_rows, m)
                for m in shown
            )
            + _audit_table(split, split_rows)
        )
    lead = (
        html.escape(metric_label(metric))
        if metric
        else "its headline metric (next-token top-1 ↑ for text splits, the win rate ↑ for "
        "preference splits)"
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>fedsynth leaderboard {html.escape(version)}</title>"
        f"<style>{STYLE}</style></head><body><h1>fedsynth leaderboard</h1>{nav}"
        + (f"<h2>{html.escape(track.title)}</h2>" if track else "")
        + f"<p>Version {html.escape(version)}. Each split leads with {lead}: "
        "mean ± 95% CI, a bootstrap over test clients and seeds where the entry kept "
        "per-client hits (else over seeds, marked *); where the split has the public-only "
        "and non-private "
        "bounds, the share of that gap a row closes, then each row's difference from "
        "public_only and generator_only and its gap closed with paired bootstrap 95% CIs over "
        "test clients and seeds. A method's cell is ranked "
        f"only with at least {MIN_RANKED_SEEDS} seeds. "
        "<span class='badge bound'>bound</span> rows anchor that scale, "
        "<span class='badge control'>control</span> rows calibrate it (the oracle releases real "
        "private texts without privacy, generator_only the generator's text from public prompts "
        "with no private signal); neither is ranked. ε is recomputed by the harness from "
        "each run's ledger. Click a column to sort.</p>"
        + ("".join(sections) or "<p>No entries yet.</p>")
        + f"<script>{SORT_JS}</script></body></html>"
    )


def _nav(
    all_versions: Sequence[str], current: str, prefix: str, titles: dict[str, str] | None = None
) -> str:
    """Links to every version's page, newest first, each named by its track where it is
    one (the hash then a detail); the shown one is not a link."""
    titles = titles or {}

    def name(v: str) -> str:
        return f"{titles[v]} ({v})" if v in titles else v

    items = [
        f"<b>{_text(name(v))}</b>"
        if v == current
        else f'<a href="{_href(f"{prefix}{v}/index.html")}">{_text(name(v))}</a>'
        for v in reversed(all_versions)
    ]
    return f'<p class="versions">Versions (newest first): {" · ".join(items)}</p>'


def _best_cells(view: TrackView) -> str:
    """The track's best ranked method per ε with its 95 % CI; when no ε has a ranked cell,
    why, and the highest method row per ε as it stands (marked unranked, with its seeds)."""
    if view.version is None:
        return "not yet run under the suite"
    ranked, leading = [], []
    for split in sorted({r.split for r in view.rows}):
        table = build_table(view.rows, split)
        for eps in table.epsilons:
            method = table.best.get(eps)
            if method is not None:
                cell = table.cells[method, eps]
                ranked.append(
                    f"ε = {format_epsilon(eps)}: <b>{_text(method)}</b> "
                    f"{_text(format_cell(cell))} ({cell.n} seeds)"
                )
            elif (top := _leading_unranked(table, eps)) is not None:
                leading.append(top)
    if ranked:
        return "<br>".join(ranked)
    why = f"none ranked: no method cell has ≥ {MIN_RANKED_SEEDS} seeds and a clean audit"
    return "<br>".join([why, *(["highest method rows, unranked:"] if leading else []), *leading])


def _leading_unranked(table: Table, eps: float) -> str | None:
    """The highest method row at ``eps`` (none is ranked there), with why it is not."""
    method = table.highest(eps, lambda m, _: table.roles[m] == "method")
    if method is None:
        return None
    cell = table.cells[method, eps]
    if (method, eps) in table.flagged:
        why = "its audit refutes ε"
    elif method in table.apart:
        why = "another privacy unit or instrument"
    else:
        why = f"{cell.n} of {MIN_RANKED_SEEDS} seeds"
    return f"ε = {format_epsilon(eps)}: {_text(method)} {_text(format_cell(cell))} ({why})"


def _references(view: TrackView) -> str:
    """The track's bound and control rows with their means: what its methods are read
    against (the ε = 0 / ε = ∞ bounds, or the base model on the preference track)."""
    found = []
    for split in sorted({r.split for r in view.rows}):
        table = build_table(view.rows, split)
        for method in table.methods:
            if table.roles[method] != "method":
                for eps in table.epsilons:
                    if (method, eps) in table.cells:
                        found.append(
                            f"{_text(method)} (ε = {format_epsilon(eps)}) "
                            f"{_text(format_cell(table.cells[method, eps]))}"
                        )
    return "<br>".join(found)


def _overview(views: Sequence[TrackView]) -> str:
    """Every track: its name linking to its page, what it measures, its split in words and
    privacy unit, its headline metric, the best ranked method per ε with its CI, and the
    reference rows; the version hash is a detail."""
    body = []
    for view in views:
        title = _text(view.track.title)
        if view.version is not None:
            title = f'<a href="{_href(f"{view.version}/index.html")}">{title}</a>'
        metric = ""
        if view.rows:
            split = sorted({r.split for r in view.rows})[0]
            metric = metric_label(headline_metrics(view.rows, split)[0])
        body.append(
            f"<tr><td class='track'>{title}<br><span class='hash'>"
            f"{_text(view.version or '')}</span></td>"
            f"<td>{_text(view.summary())}</td>"
            f"<td>{_text(metric)}</td><td class='best'>{_best_cells(view)}</td>"
            f"<td>{_references(view)}</td></tr>"
        )
    head = ["track", "what it measures, split, privacy unit", "headline", "best ranked"]
    head.append("reference rows")
    cols = "".join(f"<th>{h}</th>" for h in head)
    return (
        "<h2>Tracks</h2><table class='tracks'>"
        f"<thead><tr>{cols}</tr></thead><tbody>{''.join(body)}</tbody></table>"
        "<p>Best ranked: the highest mean among method rows with at least "
        f"{MIN_RANKED_SEEDS} seeds and an audit within ε, ± the 95% interval half-width "
        "(over test clients and seeds where the entry kept per-client hits, else over seeds)."
        " Each track's page has its full table, paired intervals and audits.</p>"
    )


def _record_name(row: Row) -> str:
    """Where a row's entry is copied under ``records/`` (a secondary store in a subfolder)."""
    return f"{row.store}/{row.path}" if row.store else row.path


def _manifests(root: Path, version: str) -> dict[str, dict]:
    found = {}
    for path in sorted((root / version / MANIFESTS_DIR).glob("*.json")):
        manifest = json.loads(path.read_text())
        found[manifest.get("name", path.stem.split("@")[0])] = manifest
    return found


def write_site(
    results_root: Path,
    out_dir: Path,
    metric: str | None = None,
    shown: str | None = None,
    others: dict[str, Path] | None = None,
) -> Path:
    """One page per leaderboard version (``<version>/index.html``, with copies of its
    entries) and ``index.html`` showing ``shown`` (default: the newest); every page links
    to every version, so old versions stay browsable. Rows of the ``others`` stores (label
    → root, e.g. the published store beside a user's own) appear labelled beside them.
    ``metric`` (default: each split's headline) leads every table and plot."""
    roots = {"": results_root, **(others or {})}
    grouped = grouped_rows(results_root, others)
    views = track_views(results_root, grouped)
    tracks = {v.version: v.track for v in views if v.version}
    titles = {version: track.title for version, track in tracks.items()}
    all_versions = list(grouped)
    shown = shown or (all_versions[-1] if all_versions else "none")
    out_dir.mkdir(parents=True, exist_ok=True)
    for version, rows in grouped.items():
        (out_dir / version).mkdir(exist_ok=True)  # also for a version directory with no entries
        manifests: dict[str, dict] = {}
        for root in reversed(roots.values()):
            manifests.update(_manifests(root, version))
        links = {}
        for row in rows:
            target = out_dir / version / "records" / _record_name(row)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(roots[row.store] / row.path, target)
            links[_record_name(row)] = f"records/{_record_name(row)}"
        nav = _nav(all_versions, version, "../", titles)
        (out_dir / version / "index.html").write_text(
            _page(rows, version, links, nav, metric, manifests, tracks.get(version))
        )
        (out_dir / version / "entries.json").write_text(
            json.dumps([r.entry for r in rows], indent=1)
        )
        if version == shown:
            root_links = {k: f"{version}/{v}" for k, v in links.items()}
            nav = _overview(views) + _nav(all_versions, version, "", titles)
            (out_dir / "index.html").write_text(
                _page(rows, version, root_links, nav, metric, manifests, tracks.get(version))
            )
    if shown not in all_versions:
        nav = _overview(views) + _nav(all_versions, shown, "", titles)
        (out_dir / "index.html").write_text(_page([], shown, {}, nav, metric, {}))
    return out_dir / "index.html"
