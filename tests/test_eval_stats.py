"""Seed aggregation and gap closed."""

import math

import pytest

from benchmark.evaluation.stats import gap_closed, summarize


def test_summary_uses_the_student_t_quantile():
    s = summarize([1.0, 2.0, 3.0])
    t_975_df2 = 4.302652729911275  # from t tables
    half = t_975_df2 * 1.0 / math.sqrt(3)  # sample std of 1, 2, 3 is 1
    assert (s.n, s.mean, s.std) == (3, 2.0, 1.0)
    assert s.ci_low == pytest.approx(2.0 - half) and s.ci_high == pytest.approx(2.0 + half)
    assert summarize([5.0]).as_dict() == {
        "n": 1,
        "mean": 5.0,
        "std": None,
        "ci_low": None,
        "ci_high": None,
        "confidence": 0.95,
    }
    with pytest.raises(ValueError):
        summarize([1.0, float("nan")])


def test_gap_closed_for_higher_and_lower_is_better_scores():
    assert gap_closed(0.40, 0.30, 0.50) == pytest.approx(0.5)  # accuracy
    assert gap_closed(3.0, 4.0, 2.0) == pytest.approx(0.5)  # cross-entropy
    assert gap_closed(0.30, 0.30, 0.50) == 0.0 and gap_closed(0.5, 0.3, 0.5) == 1.0
    with pytest.raises(ValueError, match="anchors are equal"):
        gap_closed(0.4, 0.3, 0.3)
