"""The static leaderboard site: one sortable table per split, privacy–utility plots, and
every row linked to its entry JSON. Plain HTML + a few lines of JS; no network needed."""

from __future__ import annotations

import html
import json
import math
import shutil
from collections.abc import Sequence
from pathlib import Path

from leaderboard.store import Row, rows_by_version
from leaderboard.tables import BOUND_METHODS, DEFAULT_METRIC, LOWER_IS_BETTER, format_epsilon

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
svg{border:1px solid #ddd;background:#fff}
"""

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")


def _metric_names(rows: Sequence[Row]) -> list[str]:
    names = sorted(
        {k for r in rows for k in r.entry["metrics"]} | {k for r in rows for k in r.entry["audit"]}
    )
    return [
        n
        for n in names
        if not n.endswith(("n_members", "n_nonmembers", "n_real", "n_synthetic", "test_tokens"))
    ]


def _cell(summary: dict | None) -> str:
    if summary is None:
        return '<td class="num" data-value=""></td>'
    std = f" ± {summary['std']:.4f}" if summary["std"] is not None else ""
    return f'<td class="num" data-value="{summary["mean"]!r}">{summary["mean"]:.4f}{std}</td>'


def _table(split: str, rows: Sequence[Row], record_links: dict[str, str]) -> str:
    metrics = _metric_names(rows)
    head = "".join(
        f"<th>{html.escape(h)}</th>" for h in ["method", "ε", "guarantee", *metrics, "record"]
    )
    body = []
    for row in rows:
        values = {**row.entry["metrics"], **row.entry["audit"]}
        eps = row.epsilon_budget
        body.append(
            "<tr>"
            f"<td>{html.escape(row.method)}</td>"
            f'<td class="num" data-value="{1e308 if math.isinf(eps) else eps}">{format_epsilon(eps)}</td>'
            f"<td>{html.escape(row.guarantee)}</td>"
            + "".join(_cell(values.get(m)) for m in metrics)
            + f'<td><a href="{record_links[row.path]}">json</a></td></tr>'
        )
    return (
        f'<h2 id="split-{html.escape(split)}">{html.escape(split)}</h2>'
        f'<table class="sortable" data-split="{html.escape(split)}"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table>"
    )


def _plot(split: str, rows: Sequence[Row], metric: str) -> str:
    """Metric against ε per method (log ε axis); the bounds are horizontal dashed lines."""
    points: dict[str, list[tuple[float, float]]] = {}
    for row in rows:
        if metric in row.entry["metrics"]:
            points.setdefault(row.method, []).append(
                (row.epsilon_budget, row.entry["metrics"][metric]["mean"])
            )
    finite = sorted({e for pts in points.values() for e, _ in pts if 0 < e < math.inf})
    values = [v for pts in points.values() for _, v in pts]
    if not values or not finite:
        return ""
    w, h, pad = 560, 320, 50
    lo_e, hi_e = math.log10(min(finite)) - 0.5, math.log10(max(finite)) + 0.5
    lo_v, hi_v = min(values), max(values)
    span = (hi_v - lo_v) or 1.0
    x = lambda e: pad + (math.log10(e) - lo_e) / (hi_e - lo_e) * (w - 2 * pad)  # noqa: E731
    y = lambda v: h - pad - (v - lo_v) / span * (h - 2 * pad)  # noqa: E731
    parts = [f'<line x1="{pad}" y1="{h - pad}" x2="{w - pad}" y2="{h - pad}" stroke="#999"/>']
    for e in finite:
        parts.append(
            f'<text x="{x(e):.1f}" y="{h - pad + 18}" font-size="11" text-anchor="middle">{format_epsilon(e)}</text>'
        )
    parts.append(f'<text x="{w / 2}" y="{h - 8}" font-size="12" text-anchor="middle">ε</text>')
    parts.append(f'<text x="8" y="{pad - 20}" font-size="12">{html.escape(metric)}</text>')
    for v in (lo_v, hi_v):
        parts.append(f'<text x="4" y="{y(v):.1f}" font-size="10">{v:.3g}</text>')
    for i, (method, pts) in enumerate(sorted(points.items())):
        color = PALETTE[i % len(PALETTE)]
        if method in BOUND_METHODS:
            parts.append(
                f'<line x1="{pad}" x2="{w - pad}" y1="{y(pts[0][1]):.1f}" y2="{y(pts[0][1]):.1f}" stroke="{color}" stroke-dasharray="4"/>'
            )
        else:
            pts = sorted(p for p in pts if 0 < p[0] < math.inf)
            path = " ".join(f"{x(e):.1f},{y(v):.1f}" for e, v in pts)
            parts.append(f'<polyline points="{path}" fill="none" stroke="{color}"/>')
            parts += [
                f'<circle cx="{x(e):.1f}" cy="{y(v):.1f}" r="3" fill="{color}"/>' for e, v in pts
            ]
        parts.append(
            f'<text x="{w - pad + 4}" y="{pad + 14 * i}" font-size="11" fill="{color}">{html.escape(method)}</text>'
        )
    return f'<svg class="plot" width="{w + 80}" height="{h}" data-split="{html.escape(split)}">{"".join(parts)}</svg>'


def _page(rows: Sequence[Row], version: str, links: dict[str, str], nav: str, metric: str) -> str:
    direction = "lower" if metric in LOWER_IS_BETTER else "higher"
    sections = []
    for split in sorted({r.split for r in rows}):
        split_rows = [r for r in rows if r.split == split]
        sections.append(_table(split, split_rows, links) + _plot(split, split_rows, metric))
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>fedsynth leaderboard {version}</title>"
        f"<style>{STYLE}</style></head><body><h1>fedsynth leaderboard</h1>{nav}"
        f"<p>Version {html.escape(version)}; plots show {html.escape(metric)} ({direction} is better) "
        f"against ε. ε is recomputed by the harness from each run's ledger. Click a column to sort.</p>"
        + ("".join(sections) or "<p>No entries yet.</p>")
        + f"<script>{SORT_JS}</script></body></html>"
    )


def _nav(all_versions: Sequence[str], current: str, prefix: str) -> str:
    """Links to every version's page, newest first; the shown one is not a link."""
    items = [
        f"<b>{html.escape(v)}</b>" if v == current else f'<a href="{prefix}{v}/index.html">{v}</a>'
        for v in reversed(all_versions)
    ]
    return f'<p class="versions">Versions (newest first): {" · ".join(items)}</p>'


def write_site(
    results_root: Path, out_dir: Path, metric: str = DEFAULT_METRIC, shown: str | None = None
) -> Path:
    """One page per leaderboard version (``<version>/index.html``, with copies of its
    entries) and ``index.html`` showing ``shown`` (default: the newest); every page links
    to every version, so old versions stay browsable."""
    grouped = rows_by_version(results_root)
    all_versions = list(grouped)
    shown = shown or (all_versions[-1] if all_versions else "none")
    out_dir.mkdir(parents=True, exist_ok=True)
    for version, rows in grouped.items():
        links = {}
        for row in rows:
            target = out_dir / version / "records" / row.path
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(results_root / row.path, target)
            links[row.path] = f"records/{row.path}"
        page = _page(rows, version, links, _nav(all_versions, version, "../"), metric)
        (out_dir / version / "index.html").write_text(page)
        (out_dir / version / "entries.json").write_text(
            json.dumps([r.entry for r in rows], indent=1)
        )
        if version == shown:
            root_links = {k: f"{version}/{v}" for k, v in links.items()}
            index = _page(rows, version, root_links, _nav(all_versions, version, ""), metric)
            (out_dir / "index.html").write_text(index)
    if shown not in all_versions:
        (out_dir / "index.html").write_text(
            _page([], shown, {}, _nav(all_versions, shown, ""), metric)
        )
    return out_dir / "index.html"
