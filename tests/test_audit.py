"""One-run canary audit: published values of Steinke, Nasr & Jagielski (2023), properties of
the bound, Monte-Carlo validity on exactly-ε mechanisms, the split search, the scores.

Published values are those of arXiv:2305.08846v1 (Appendix D's worked examples of its
reference code, and §7's examples), printed to three decimals; the tolerance is one unit
in the last printed digit, since the paper rounds some values and truncates others.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchmark.privacy.audit import (
    BETA,
    EPS_TOL,
    AuditResult,
    audit,
    default_guess_grid,
    epsilon_lower_bound,
    guess_outcome,
    loss_difference_scores,
    max_attainable_bound,
    max_cosine_scores,
    p_value,
)

PRINTED = 1e-3  # one unit in the third decimal


# --- published values -------------------------------------------------------------------


def test_appendix_d_p_value_75_of_100_at_ln3():
    assert p_value(100, 100, 75, math.log(3), 0.0) == pytest.approx(0.553, abs=PRINTED)


@pytest.mark.parametrize(
    ("m", "r", "v", "delta", "published"),
    [
        (100, 100, 75, 0.0, 0.702),  # App. D, pure ε
        (100, 100, 75, 1e-4, 0.699),  # App. D, the 2mδ term
        (1000, 100, 75, 1e-4, 0.673),  # App. D, abstentions: r < m, so 2mδ grows
        (100_000, 1510, 1439, 1e-5, 2.675),  # §7 (Fig. 11 text)
    ],
)
def test_published_lower_bounds(m, r, v, delta, published):
    assert epsilon_lower_bound(m, r, v, delta, 0.05) == pytest.approx(published, abs=PRINTED)


def test_section_7_randomized_response_eps_4_bound_approaches_4():
    # r = 10,000 guesses at ε = 4 randomized-response accuracy, δ = 1e-5: "ε ≥ 3.87". The
    # text does not state m; m = r reproduces it (m only enters through the δ term).
    v = math.floor(10_000 * math.exp(4) / (math.exp(4) + 1))
    assert v == 9820
    assert epsilon_lower_bound(10_000, 10_000, v, 1e-5) == pytest.approx(3.87, abs=2 * PRINTED)


# --- properties of the bound ------------------------------------------------------------


@pytest.mark.parametrize("r", [16, 100, 1000])
def test_perfect_guessing_without_delta_has_a_closed_form(r):
    # δ = 0 and v = r: the p-value is q^r, q = e^ε/(e^ε+1), so q = β^(1/r).
    exact = math.log(1.0 / (BETA ** (-1.0 / r) - 1.0))
    assert epsilon_lower_bound(r, r, r, 0.0) == pytest.approx(exact, abs=2 * EPS_TOL)


def test_bound_is_monotone_in_v_and_capped_by_perfect_guessing():
    m = r = 200
    bounds = [epsilon_lower_bound(m, r, v, 1e-5) for v in range(r + 1)]
    assert all(a <= b for a, b in zip(bounds, bounds[1:], strict=False))
    assert max(bounds) == bounds[-1] == pytest.approx(max_attainable_bound(m, 1e-5, grid=((r, 0),)))


@pytest.mark.parametrize(("r", "v"), [(10, 5), (100, 50), (100, 55), (1000, 500), (1000, 520)])
def test_no_better_than_a_coin_gives_zero(r, v):
    assert epsilon_lower_bound(r, r, v, 1e-5) == 0.0


def test_returned_bound_is_refuted_and_tight():
    for m, r, v, delta in [(100, 100, 75, 0.0), (1000, 100, 75, 1e-4), (500, 300, 260, 1e-5)]:
        eps = epsilon_lower_bound(m, r, v, delta)
        assert p_value(m, r, v, eps, delta) < BETA <= p_value(m, r, v, eps + 2 * EPS_TOL, delta)


def test_delta_more_canaries_and_more_confidence_all_lower_the_bound():
    base = epsilon_lower_bound(1000, 100, 80, 1e-5)
    assert epsilon_lower_bound(1000, 100, 80, 1e-3) < base  # larger δ
    assert epsilon_lower_bound(100_000, 100, 80, 1e-5) < base  # more canaries abstained on
    assert epsilon_lower_bound(1000, 100, 80, 1e-5, beta=0.01) < base  # 99% confidence
    assert epsilon_lower_bound(1000, 100, 80, 0.0) > base


@pytest.mark.parametrize("eps", [1.0, 2.0, 4.0])
def test_bound_approaches_true_epsilon_from_below_as_guesses_grow(eps):
    # The expected outcome of ε-randomized response: v = r·e^ε/(e^ε+1) right guesses.
    q = math.exp(eps) / (1 + math.exp(eps))
    bounds = [epsilon_lower_bound(r, r, math.floor(r * q), 0.0) for r in (100, 1000, 100_000)]
    assert bounds[0] < bounds[1] < bounds[2] < eps
    assert bounds[2] > 0.9 * eps


def test_invalid_counts_are_refused():
    with pytest.raises(ValueError, match="v <= r <= m"):
        epsilon_lower_bound(10, 20, 5, 1e-5)
    with pytest.raises(ValueError, match="v <= r <= m"):
        p_value(10, 5, 6, 1.0, 0.0)
    with pytest.raises(ValueError, match="beta"):
        epsilon_lower_bound(10, 10, 9, 1e-5, beta=0.0)


# --- Monte-Carlo validity -----------------------------------------------------------------


def _exceedance(v: np.ndarray, m: int, eps: float, delta: float) -> float:
    """Share of trials whose bound exceeds the true ε (each distinct v is bounded once)."""
    bound = {int(x): epsilon_lower_bound(m, m, int(x), delta) for x in np.unique(v)}
    return float(np.mean([bound[int(x)] > eps for x in v]))


def _allowed(trials: int) -> float:
    return BETA + 3 * math.sqrt(BETA * (1 - BETA) / trials)


def test_exactly_eps_randomized_response_exceeds_eps_at_most_beta_of_the_time():
    rng = np.random.default_rng(20230515)
    m, eps, trials = 400, 1.0, 4000
    included = rng.random((trials, m)) < 0.5
    flipped = rng.random((trials, m)) < 1 / (1 + math.exp(eps))  # ε-DP in each bit
    guesses = included ^ flipped
    v = (guesses == included).sum(axis=1)
    assert _exceedance(v, m, eps, 0.0) <= _allowed(trials)


def test_eps_delta_mechanism_exceeds_eps_at_most_beta_of_the_time():
    # Each bit is revealed with probability δ, otherwise randomized response: (ε, δ)-DP.
    rng = np.random.default_rng(7)
    m, eps, delta, trials = 400, 1.0, 0.01, 4000
    included = rng.random((trials, m)) < 0.5
    revealed = rng.random((trials, m)) < delta
    flipped = (rng.random((trials, m)) < 1 / (1 + math.exp(eps))) & ~revealed
    v = ((included ^ flipped) == included).sum(axis=1)
    assert _exceedance(v, m, eps, delta) <= _allowed(trials)


def test_split_search_with_union_bound_stays_valid_and_without_it_does_not():
    # Continuous scores: the randomized-response bit plus noise independent of the bits.
    # Keeping the best split at level β each (no correction) inflates the bound.
    rng = np.random.default_rng(11)
    m, eps, trials = 200, 1.0, 300
    corrected = uncorrected = 0
    for _ in range(trials):
        included = rng.random(m) < 0.5
        flipped = rng.random(m) < 1 / (1 + math.exp(eps))
        scores = (included ^ flipped) + rng.random(m)
        corrected += audit(scores, included, 0.0).epsilon_lower_bound > eps
        uncorrected += any(
            epsilon_lower_bound(m, *guess_outcome(scores, included, *split), 0.0) > eps
            for split in default_guess_grid(m)
        )
    assert corrected / trials <= _allowed(trials)
    assert uncorrected / trials > 2 * BETA


# --- the split search -------------------------------------------------------------------


def test_guess_outcome_ranks_abstains_on_nan_and_breaks_ties_by_index():
    scores = np.array([0.9, np.nan, 0.1, 0.5, 0.5, 0.0])
    included = np.array([1, 1, 0, 0, 1, 1], bool)
    # top 2: index 0 (in, right) and index 3 (tie with 4, lower index first; out, wrong)
    assert guess_outcome(scores, included, 2, 0) == (2, 1)
    # bottom 2 "out": index 5 (in, wrong) and index 2 (out, right)
    assert guess_outcome(scores, included, 0, 2) == (2, 1)
    # more guesses than valid scores: top 4 "in" (0, 3, 4, 2: two right), the one left
    # "out" (5: wrong); r stays as planned and no canary is guessed twice
    assert guess_outcome(scores, included, 4, 4) == (8, 2)


def test_default_grid_depends_on_m_only_and_is_valid():
    grid = default_guess_grid(1000)
    assert grid[:2] == [(20, 0), (10, 10)]
    assert (1000, 0) in grid and (500, 500) in grid
    assert len(grid) == len(set(grid)) == 12
    assert default_guess_grid(1) == [(1, 0)]
    assert all(0 < kp + km <= 7 for kp, km in default_guess_grid(7))


def test_single_split_is_a_fixed_budget_without_correction():
    rng = np.random.default_rng(3)
    included = rng.random(300) < 0.5
    scores = included + rng.normal(0, 0.8, 300)
    result = audit(scores, included, 1e-5, grid=[(30, 30)])
    r, v = guess_outcome(scores, included, 30, 30)
    assert (result.r, result.v, result.candidates) == (r, v, 1)
    assert result.epsilon_lower_bound == epsilon_lower_bound(300, r, v, 1e-5)


def test_leaky_release_reaches_the_ceiling_and_would_be_flagged():
    rng = np.random.default_rng(5)
    included = rng.random(1000) < 0.5
    scores = included + rng.normal(0, 0.01, 1000)  # a release that memorizes its canaries
    result = audit(scores, included, 1e-5)
    assert result.v == result.r
    assert 4.0 < result.epsilon_lower_bound <= result.epsilon_ceiling  # ε = 4 claim flagged
    assert result.epsilon_ceiling < epsilon_lower_bound(1000, 1000, 1000, 1e-5)  # union bound


def test_private_release_reports_zero_with_the_most_convincing_split():
    rng = np.random.default_rng(9)
    included = rng.random(500) < 0.5
    result = audit(rng.normal(size=500), included, 1e-5)
    assert result.epsilon_lower_bound == 0.0
    assert result.r > 0 and 0 < result.v <= result.r
    record = result.to_record()
    assert record["epsilon_lower_bound"] == 0.0 and record["confidence"] == 0.95
    assert set(record) == set(AuditResult.__dataclass_fields__)


def test_audit_refuses_bad_inputs():
    with pytest.raises(ValueError, match="inclusion bit"):
        audit([0.1, 0.2], [1, 2], 1e-5)
    with pytest.raises(ValueError, match="inclusion bit"):
        audit([0.1, 0.2], [1], 1e-5)
    with pytest.raises(ValueError, match="k\\+ \\+ k-"):
        audit([0.1, 0.2], [1, 0], 1e-5, grid=[(2, 1)])
    with pytest.raises(ValueError, match="empty"):
        audit([0.1, 0.2], [1, 0], 1e-5, grid=[])


# --- scores -------------------------------------------------------------------------------


def test_loss_difference_is_start_loss_minus_release_loss():
    scores = loss_difference_scores([1.0, 3.0, np.nan], [2.5, 3.0, 1.0])
    np.testing.assert_allclose(scores[:2], [1.5, 0.0])
    assert np.isnan(scores[2])
    with pytest.raises(ValueError, match="equal length"):
        loss_difference_scores([1.0], [1.0, 2.0])


def test_max_cosine_is_the_nearest_released_text_similarity():
    canaries = np.array([[1.0, 0.0], [0.0, 2.0], [0.0, 0.0]])
    released = np.array([[0.0, 1.0], [3.0, 3.0]])
    np.testing.assert_allclose(
        max_cosine_scores(canaries, released, chunk=2), [1 / math.sqrt(2), 1.0, 0.0]
    )


def test_max_cosine_ranks_like_minus_nearest_distance_on_unit_embeddings():
    rng = np.random.default_rng(0)
    canaries, released = rng.normal(size=(50, 8)), rng.normal(size=(30, 8))
    unit_c = canaries / np.linalg.norm(canaries, axis=1, keepdims=True)
    unit_r = released / np.linalg.norm(released, axis=1, keepdims=True)
    nearest = np.linalg.norm(unit_c[:, None] - unit_r[None], axis=2).min(axis=1)
    cos = max_cosine_scores(canaries, released)
    np.testing.assert_array_equal(np.argsort(cos), np.argsort(-nearest))


def test_max_cosine_refuses_empty_or_mismatched_releases():
    with pytest.raises(ValueError, match="empty"):
        max_cosine_scores(np.ones((2, 3)), np.empty((0, 3)))
    with pytest.raises(ValueError, match="widths"):
        max_cosine_scores(np.ones((2, 3)), np.ones((2, 4)))
