"""Paper-style tables: methods × ε for one metric, best per column in bold, plus gap closed."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from benchmark.evaluation.stats import gap_closed
from leaderboard.store import Row

# Metrics where smaller is better; everything else is larger-is-better.
LOWER_IS_BETTER = ("next_token.ce", "fid.fid", "mia.loss_auc", "mia.calibrated_auc", "dcr.auc")
DEFAULT_METRIC = "next_token.top1"
BOUND_METHODS = {"public_only": 0.0, "nonprivate": math.inf}


@dataclass
class Table:
    split: str
    metric: str
    epsilons: list[float]
    methods: list[str]
    cells: dict[tuple[str, float], tuple[float, float | None]]  # (mean, std)
    gap: dict[tuple[str, float], float]
    best: dict[float, str]

    def to_json(self) -> dict:
        fmt = format_epsilon
        return {
            "split": self.split,
            "metric": self.metric,
            "lower_is_better": self.metric in LOWER_IS_BETTER,
            "epsilons": [fmt(e) for e in self.epsilons],
            "rows": [
                {
                    "method": m,
                    **{
                        f"eps={fmt(e)}": {
                            "mean": self.cells[m, e][0],
                            "std": self.cells[m, e][1],
                            "gap_closed": self.gap.get((m, e)),
                            "best": self.best.get(e) == m,
                        }
                        for e in self.epsilons
                        if (m, e) in self.cells
                    },
                }
                for m in self.methods
            ],
        }


def format_epsilon(eps: float) -> str:
    return "inf" if math.isinf(eps) else f"{eps:g}"


def build_table(rows: Sequence[Row], split: str, metric: str = DEFAULT_METRIC) -> Table:
    rows = [r for r in rows if r.split == split and metric in r.entry["metrics"]]
    cells = {}
    for row in rows:
        summary = row.entry["metrics"][metric]
        cells[row.method, row.epsilon_budget] = (summary["mean"], summary["std"])
    epsilons = sorted({e for _, e in cells})
    methods = sorted({m for m, _ in cells}, key=lambda m: (m not in BOUND_METHODS, m))
    anchors = {b: cells.get((b, e)) for b, e in BOUND_METHODS.items()}
    gap = {}
    if all(anchors.values()):
        low, high = anchors["public_only"][0], anchors["nonprivate"][0]
        if low != high:
            gap = {key: gap_closed(mean, low, high) for key, (mean, _) in cells.items()}
    sign = -1 if metric in LOWER_IS_BETTER else 1
    best = {}
    for eps in epsilons:
        contenders = [(sign * cells[m, eps][0], m) for m in methods if (m, eps) in cells]
        best[eps] = max(contenders)[1]
    return Table(split, metric, epsilons, methods, cells, gap, best)


def render_text(table: Table, bold: tuple[str, str] = ("\033[1m", "\033[0m")) -> str:
    """A fixed-width table; ``bold`` wraps the best cell of each ε column."""
    header = ["method"] + [f"ε={format_epsilon(e)}" for e in table.epsilons]
    lines = []
    for method in table.methods:
        cells = [method]
        for eps in table.epsilons:
            if (method, eps) not in table.cells:
                cells.append("")
                continue
            mean, std = table.cells[method, eps]
            text = f"{mean:.4f}" + (f"±{std:.4f}" if std is not None else "")
            if (method, eps) in table.gap and method not in BOUND_METHODS:
                text += f" (gap {100 * table.gap[method, eps]:.0f}%)"
            if table.best.get(eps) == method:
                text = f"{bold[0]}{text}{bold[1]}"
            cells.append(text)
        lines.append(cells)
    visible = [[_strip(c, bold) for c in row] for row in [header, *lines]]
    widths = [max(len(r[i]) for r in visible) for i in range(len(header))]
    direction = "lower" if table.metric in LOWER_IS_BETTER else "higher"
    out = [f"{table.split} — {table.metric} ({direction} is better)"]
    for raw, vis in zip([header, *lines], visible, strict=True):
        out.append(
            "  ".join(c + " " * (w - len(v)) for c, v, w in zip(raw, vis, widths, strict=True))
        )
    return "\n".join(out)


def _strip(text: str, bold: tuple[str, str]) -> str:
    return text.replace(bold[0], "").replace(bold[1], "") if bold[0] else text
