"""One-run canary audit: an empirical ε lower bound to set beside the accounted ε.

The statistics follow Steinke, Nasr & Jagielski, "Privacy Auditing with One (1) Training
Run" (NeurIPS 2023; theorem numbers are those of arXiv:2305.08846v1). ``m`` canaries are
each included in the run independently with probability 1/2 (Algorithm 1). After the
release the auditor scores every canary, guesses "in" for the ``k+`` highest scores and
"out" for the ``k-`` lowest, and abstains on the rest: ``r = k+ + k-`` guesses, of which
``v`` are right. If the run is (ε, δ)-DP in each canary's inclusion, ``v`` cannot be much
larger than a Binomial(r, e^ε/(e^ε+1)) draw (Theorem 5.2). Corollary 5.4, the ternary-guess
form the paper uses for all its experiments, makes that a p-value::

    P[W >= v] <= f(v) + 2·m·δ · max_{i=1..m} (f(v-i) - f(v)) / i,
    f(v) = P[Binomial(r, e^ε/(e^ε+1)) >= v].

The reported bound is the largest ε whose p-value is below β: with confidence 1 - β the
run is not (ε', δ)-DP for any ε' below it (§4.3). jax-privacy's ``auditing`` module
implements the same bound, but it needs jax and dp-accounting; this module needs only
numpy and scipy, and imports scipy where it is used.

Choosing the abstention split. The paper tries several ``(k+, k-)`` and reports the best,
and notes that this costs confidence (§6). Here the candidate splits form a grid fixed by
``m`` alone (:func:`default_guess_grid`), declared before any score is seen, and every
candidate is tested at level β/K for a grid of K splits (a union bound), so the best of
them still holds at confidence 1 - β. A single pre-registered split (a fixed guess
budget) needs no correction: pass a one-element grid.

Canary design (how the runner draws and scores canaries)
--------------------------------------------------------
Unit.
    A canary is one privacy unit of the run: a real unit of the split's train part (a client
    with all its records under ``privacy.unit = "user"``, one record under ``"sample"``).
    The accountant's guarantee is for adding or removing one unit, which is exactly what
    flipping a canary's inclusion bit does, so Theorem 5.2 applies with the run's own
    (ε, δ). Being real units of the same distribution, canaries cannot be told apart from
    the other units by their form; marker canaries could (issue 33).
How many.
    ``m = min(1000, n_units // 10)`` canaries, ``n_units`` the split's train units: 1,000
    is the paper's scale, and the cap keeps the ~m/2 held-out canaries to about 5% of the
    training population so the utility numbers barely move. ``m`` limits what the audit
    can show: even perfect guesses prove at most :func:`max_attainable_bound` (5.1 for
    m = 1,000, 2.2 for m = 50, 0.45 for m = 10 at δ = 1e-5; a perfect attack reaches about
    4.4 at m = 1,000, as the in/out counts are rarely exactly m/2), recorded as
    ``epsilon_ceiling``. An entry whose claimed ε is above the ceiling cannot be flagged.
Selection and inclusion bits.
    The m units are drawn uniformly without replacement, then ``S_i ~ Bernoulli(1/2)``
    i.i.d., both from the run's secret pool seed (``pool_seed.secret``) through a stream
    of their own, so they are neither in the spec nor in the record. An included canary
    stays in the run as the unit it is; an excluded one is held out and never seen. The
    canary order (which ties are broken by) is the draw's, fixed before the bits. With
    ``privacy.noise_seed = "spec"`` the bits are derivable from the public spec, so the
    record marks that audit as not blind.
Scoring.
    After the release, in the trusted evaluator (which alone reads the bits), each canary
    gets a score that is a function of the release, the canary's records and public data
    only, higher meaning "more likely included". A model release uses
    :func:`loss_difference_scores` (loss under the public start minus under the released
    model, averaged over the canary's texts); a text release also the copy score (whether
    the release copies the canary's texts, by the verbatim detector's rule, then
    :func:`max_cosine_scores`). NaN scores are abstentions.
Record.
    :func:`audit` with the run's δ and β = 0.05 gives an :class:`AuditResult`;
    ``AuditResult.to_record()`` is stored as the record's ``audit`` block
    (``audit.epsilon_lower_bound`` at 95%, with ``m``, ``r``, ``v``, the chosen split,
    the grid size and the ceiling), plus the score kind. The leaderboard flags an entry
    whose ``audit.epsilon_lower_bound`` exceeds its accounted ``privacy.epsilon``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

BETA = 0.05
# ε resolution of the bisection; the returned bound is the low end of the last bracket.
EPS_TOL = 1e-6
# Fractions of m the default grid guesses on, each one-sided ("in" only) and split evenly.
GRID_FRACTIONS = (0.02, 0.05, 0.1, 0.2, 0.5, 1.0)


def p_value(m: int, r: int, v: int, epsilon: float, delta: float) -> float:
    """Upper bound on P[v or more right guesses] if the run is (ε, δ)-DP (Corollary 5.4).

    The first term is the binomial tail of pure ε-DP (the guesser is no better than
    randomized response, Theorem 5.2). The second pays for δ: the maximum over shifts
    ``i`` of the tail mass gained by lowering the threshold from v to v - i, per unit of
    shift, times 2mδ. Shifts ``i > v`` gain no mass beyond ``i = v``, so ``i`` stops at v.
    """
    _check_counts(m, r, v)
    from scipy.special import bdtrc, expit

    q = float(expit(epsilon))  # accuracy of ε-randomized response
    tail = float(bdtrc(v - 1, r, q))  # P[Binomial(r, q) >= v]
    if delta == 0.0 or v == 0:
        return min(tail, 1.0)
    shifts = np.arange(1, v + 1)
    gained = bdtrc(v - 1 - shifts, r, q) - tail  # P[v - i <= Binomial < v]
    return min(tail + 2.0 * m * delta * float(np.max(gained / shifts)), 1.0)


def epsilon_lower_bound(m: int, r: int, v: int, delta: float, beta: float = BETA) -> float:
    """Largest ε the outcome (m, r, v) refutes at level β: a (1 - β)-confidence lower bound.

    Bisection keeps ``p_value(lo) < β <= p_value(hi)`` and returns ``lo``, so the result
    always has a p-value below β. That alone makes it valid even where the δ term keeps
    the p-value from being monotone in ε: an (ε0, δ)-DP run is (ε, δ)-DP for every
    ε >= ε0, so a p-value below β at any ε above ε0 refutes ε0 too. Returns 0.0 when not
    even ε = 0 is refuted (roughly v <= r/2 plus noise).
    """
    _check_counts(m, r, v)
    if not 0.0 <= delta <= 1.0:
        raise ValueError(f"delta must be in [0, 1], got {delta}")
    if not 0.0 < beta < 1.0:
        raise ValueError(f"beta must be in (0, 1), got {beta}")
    if p_value(m, r, v, 0.0, delta) >= beta:
        return 0.0
    lo, hi = 0.0, 1.0
    while p_value(m, r, v, hi, delta) < beta:
        lo, hi = hi, 2.0 * hi
    while hi - lo > EPS_TOL:
        mid = 0.5 * (lo + hi)
        if p_value(m, r, v, mid, delta) < beta:
            lo = mid
        else:
            hi = mid
    return lo


def refutation_p_value(m: int, r: int, v: int, epsilon: float, delta: float) -> float:
    """p-value of "the run is (ε, δ)-DP" given the recorded outcome (m, r, v) of an audit,
    corrected for every test that outcome could have been picked from: the splits of
    :func:`default_guess_grid` in each of at most two score kinds (loss or margin, and
    copy). So a threshold on it bounds how often a truly (ε, δ)-DP run is refuted, whichever
    split and score kind the audit reported."""
    tests = 2 * len(default_guess_grid(m))
    return min(1.0, tests * p_value(m, r, v, epsilon, delta))


def default_guess_grid(m: int) -> list[tuple[int, int]]:
    """Candidate ``(k+, k-)`` splits, a function of m only so it is fixed before scoring.

    For each r in :data:`GRID_FRACTIONS` of m: all guesses "in" (the top r scores), and an
    even split (top ⌈r/2⌉ "in", bottom ⌊r/2⌋ "out"). Few confident guesses win when the
    leak is small; many guesses win when it is large. Duplicates (small m) are dropped.
    """
    if m < 1:
        raise ValueError(f"m must be >= 1, got {m}")
    grid: list[tuple[int, int]] = []
    for fraction in GRID_FRACTIONS:
        r = max(1, round(fraction * m))
        for split in ((r, 0), ((r + 1) // 2, r // 2)):
            if split not in grid:
                grid.append(split)
    return grid


def guess_outcome(
    scores: np.ndarray, included: np.ndarray, k_plus: int, k_minus: int
) -> tuple[int, int]:
    """(r, v) of guessing "in" on the k+ highest scores and "out" on the k- lowest.

    NaN scores are abstentions. Ties are broken by canary index, so the canary order must
    be fixed before the inclusion bits are drawn (never sorted by them). ``r`` is the
    planned ``k+ + k-`` even when fewer scores are valid: Corollary 5.4 needs only that at
    most r guesses are made, so this stays sound.
    """
    scores, included = _check_scores(scores, included)
    valid = np.flatnonzero(~np.isnan(scores))
    ranked = valid[np.argsort(-scores[valid], kind="stable")]
    k_in = min(k_plus, len(ranked))
    k_out = min(k_minus, len(ranked) - k_in)
    right_in = int(included[ranked[:k_in]].sum())
    right_out = int((~included[ranked[len(ranked) - k_out :]]).sum())
    return k_plus + k_minus, right_in + right_out


@functools.lru_cache(maxsize=64)
def max_attainable_bound(
    m: int,
    delta: float,
    beta: float = BETA,
    grid: tuple[tuple[int, int], ...] | None = None,
) -> float:
    """The ceiling: the bound if every guess of the grid's best split were right.

    No audit with m canaries and this grid can report more, so a claimed ε above it cannot
    be refuted by design.
    Cached: it depends on the run's constants only, never on scores.
    """
    splits = _grid(m, grid)
    level = beta / len(splits)
    return max(epsilon_lower_bound(m, kp + km, kp + km, delta, level) for kp, km in splits)


@dataclass(frozen=True)
class AuditResult:
    """The audit of one run, as stored in the record's ``audit`` block."""

    epsilon_lower_bound: float
    confidence: float
    delta: float
    m: int
    r: int
    v: int
    k_plus: int
    k_minus: int
    candidates: int
    epsilon_ceiling: float

    def to_record(self) -> dict[str, float | int]:
        return asdict(self)


def audit(
    scores: Sequence[float] | np.ndarray,
    included: Sequence[bool] | np.ndarray,
    delta: float,
    beta: float = BETA,
    grid: Sequence[tuple[int, int]] | None = None,
) -> AuditResult:
    """ε lower bound at confidence 1 - β from canary scores and their true inclusion bits.

    Every split of ``grid`` (default :func:`default_guess_grid`) is tested at level β/K,
    K = len(grid), and the best is kept: a union bound over the K tests, so the reported
    bound holds at 1 - β although the split was chosen after seeing which guesses were
    right. ``m`` is the number of randomized canaries, NaN-scored ones included.
    """
    scores, included = _check_scores(np.asarray(scores), np.asarray(included))
    m = len(scores)
    grid = _grid(m, grid)
    level = beta / len(grid)

    def strength(split: tuple[int, int]) -> tuple[float, float, int, int]:
        # (bound, -p-value at ε = 0, r, v): ties at bound 0 go to the most convincing split.
        r, v = guess_outcome(scores, included, *split)
        bound = epsilon_lower_bound(m, r, v, delta, level) if 2 * v > r else 0.0
        return bound, -p_value(m, r, v, 0.0, delta), r, v

    (bound, _, r, v), (k_plus, k_minus) = max((strength(s), s) for s in grid)
    return AuditResult(
        epsilon_lower_bound=bound,
        confidence=1.0 - beta,
        delta=delta,
        m=m,
        r=r,
        v=v,
        k_plus=k_plus,
        k_minus=k_minus,
        candidates=len(grid),
        epsilon_ceiling=max_attainable_bound(m, delta, beta, tuple(grid)),
    )


def loss_difference_scores(
    release_losses: Sequence[float] | np.ndarray, start_losses: Sequence[float] | np.ndarray
) -> np.ndarray:
    """Model-release score: canary loss under the public start minus under the release.

    That is the release's negative loss minus the start's: subtracting the start calibrates
    away how easy a text is for any LM, leaving what training on it added. Inputs are
    per-canary mean token losses (e.g. ``downstream.sequence_losses``); NaN passes through
    and makes the canary an abstention.
    """
    release, start = np.asarray(release_losses, float), np.asarray(start_losses, float)
    if release.shape != start.shape or release.ndim != 1:
        raise ValueError(
            f"need two 1-d loss arrays of equal length, got {release.shape} and {start.shape}"
        )
    return start - release


def max_cosine_scores(
    canary_embeddings: np.ndarray, release_embeddings: np.ndarray, chunk: int = 2048
) -> np.ndarray:
    """Text-release score: each canary's highest cosine similarity to a released text.

    A text release leaks a canary by containing a copy or paraphrase of it, which puts a
    released text close to the canary; the nearest one is the evidence. On unit-normalised
    embeddings this ranks canaries exactly as minus the Euclidean distance to the nearest
    released text (the ``dcr`` metric). Zero vectors have similarity 0 to everything.
    """
    canaries = _unit_rows(canary_embeddings, "canary_embeddings")
    released = _unit_rows(release_embeddings, "release_embeddings")
    if len(released) == 0:
        raise ValueError("release_embeddings is empty: there is no released text to score")
    if canaries.shape[1] != released.shape[1]:
        raise ValueError(
            f"embedding widths differ: {canaries.shape[1]} (canaries) vs "
            f"{released.shape[1]} (release)"
        )
    out = np.empty(len(canaries))
    for start in range(0, len(canaries), chunk):
        out[start : start + chunk] = (canaries[start : start + chunk] @ released.T).max(axis=1)
    return out


def _unit_rows(x: np.ndarray, name: str) -> np.ndarray:
    x = np.asarray(x, np.float64)
    if x.ndim != 2:
        raise ValueError(f"{name} must be 2-d (texts x dimensions), got shape {x.shape}")
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(norms > 0, norms, 1.0)


def _grid(m: int, grid: Sequence[tuple[int, int]] | None) -> list[tuple[int, int]]:
    grid = default_guess_grid(m) if grid is None else [(int(kp), int(km)) for kp, km in grid]
    if not grid:
        raise ValueError("the guess grid is empty")
    for k_plus, k_minus in grid:
        if k_plus < 0 or k_minus < 0 or not 0 < k_plus + k_minus <= m:
            raise ValueError(f"split (k+={k_plus}, k-={k_minus}) needs 0 < k+ + k- <= m={m}")
    return grid


def _check_counts(m: int, r: int, v: int) -> None:
    if not 0 <= v <= r <= m:
        raise ValueError(f"need 0 <= v <= r <= m, got m={m}, r={r}, v={v}")


def _check_scores(scores: np.ndarray, included: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    scores = np.asarray(scores, np.float64)
    if scores.ndim != 1 or len(scores) == 0:
        raise ValueError(f"scores must be a non-empty 1-d array, got shape {scores.shape}")
    included = np.asarray(included)
    if included.shape != scores.shape or not np.isin(included, (0, 1)).all():
        raise ValueError("included must hold one 0/1 (or bool) inclusion bit per score")
    return scores, included.astype(bool)
