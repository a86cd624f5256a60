"""Aggregation over seeds and the "gap closed" headline metric of paper 000."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats


@dataclass(frozen=True)
class Summary:
    """Mean, sample std and two-sided t-interval over seeds; undefined parts are None (n=1)."""

    n: int
    mean: float
    std: float | None
    ci_low: float | None
    ci_high: float | None
    confidence: float

    def as_dict(self) -> dict[str, float | int | None]:
        return asdict(self)


def summarize(values: Sequence[float], confidence: float = 0.95) -> Summary:
    """Mean, std (ddof=1) and a Student-t confidence interval of per-seed values."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0 or not np.all(np.isfinite(x)):
        raise ValueError(f"need at least one finite value per seed, got {list(values)}")
    mean = float(x.mean())
    if x.size == 1:
        return Summary(1, mean, None, None, None, confidence)
    std = float(x.std(ddof=1))
    half = float(stats.t.ppf((1 + confidence) / 2, df=x.size - 1)) * std / math.sqrt(x.size)
    return Summary(int(x.size), mean, std, mean - half, mean + half, confidence)


def gap_closed(score: float, score_eps0: float, score_epsinf: float) -> float:
    """(score - score at eps=0) / (score at eps=inf - score at eps=0).

    0 means no better than the fully private (public-only) anchor, 1 means as good as
    non-private training; the sign convention works for lower-is-better scores (e.g. CE) too.
    """
    span = score_epsinf - score_eps0
    if span == 0:
        raise ValueError("the eps=0 and eps=inf anchors are equal; gap closed is undefined")
    return (score - score_eps0) / span
