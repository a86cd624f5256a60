"""Accountants: turn the privacy ledger into ε, and solve for the noise that reaches an ε.

Three accountants compose the ledger's releases:

- ``rdp``: Rényi DP (dp-accounting's ``RdpAccountant``, default orders, the improved
  RDP → (ε, δ) conversion). The only one that also handles DP-FTRL tree aggregation.
- ``prv``: privacy random variables (Gopi et al. 2021) as ported by opacus
  (``PRVAccountant``). Reports the upper bound ``eps_upper`` with ``eps_error`` =
  :data:`PRV_EPS_ERROR` and opacus's default ``delta_error`` = δ/1000, so the value is
  a guarantee, at most about 0.01 above the true ε. Like the ``prv_accountant`` package
  it analyses the remove direction of the Poisson-subsampled Gaussian.
- ``pld``: privacy loss distributions (dp-accounting's ``PLDAccountant``, add/remove
  neighbours, both directions, pessimistic rounding) with a value discretisation of
  :data:`PLD_DISCRETISATION`. Pessimistic rounding keeps it an upper bound; 1e-3 is close
  to 1e-4 and faster (``docs/measurements/working-scale.md#accountants``).

The analytic Gaussian mechanism (Balle & Wang 2018) gives exact ε for one Gaussian
release; T full-participation Gaussian releases of noise σ equal one of noise σ/√T.

Pure ε-DP releases (Laplace, exponential mechanism) add their ε to the Gaussian part's
ε at δ (basic composition, as paper 003 accounts DP-PCA + DP-KMeans + DP-SGD). Releases
on the parts of one partition (paper 003's per-cluster DP-SGD) compose in parallel: a
unit is in one part, so the ledger's ε is the worst part's, each part composed with the
releases that touch every unit. An ``uncharged`` release (``guarantee: simulated`` runs
only) adds nothing: that is what makes such a run's ε simulated.

Neighbouring datasets: add/remove of one unit for every mechanism but the tree, which
dp-accounting bounds under zero-out (the unit replaced by nothing, N public; the
subsampled Gaussian's RDP is the same under both). DP-FTRL with cohorts smaller than N is
therefore stated under zero-out, as its papers state it (``methods/dp_ftrl.py``).

dp-accounting, opacus (which loads torch) and scipy are imported where they are used,
so importing this module (the CLI does, for every command) stays cheap.
"""

from __future__ import annotations

import math
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from benchmark.privacy.ledger import (
    NONPRIVATE,
    PURE,
    SUBSAMPLED_GAUSSIAN,
    TREE_AGGREGATION,
    UNCHARGED,
    Release,
)

if TYPE_CHECKING:
    from dp_accounting import DpEvent, PrivacyAccountant

ACCOUNTANTS = ("rdp", "prv", "pld")
SOLVABLE_MECHANISMS = (SUBSAMPLED_GAUSSIAN, TREE_AGGREGATION)
PRV_EPS_ERROR = 0.01
PLD_DISCRETISATION = 1e-3
# Noise multipliers the solver searches, and its relative tolerance on σ.
SIGMA_MIN, SIGMA_MAX = 1e-2, 1e4
SIGMA_RTOL = 1e-4

# (mechanism, noise_multiplier, sample_rate, leaves) -> number of compositions
_Composition = tuple[str, float, float, int]


def _check_choice(name: str, value: str, allowed: Sequence[str]) -> None:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {tuple(allowed)}, got {value!r}")


def _check_delta(delta: float) -> None:
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta}")


def _check_positive(name: str, value: float) -> None:
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {value}")


def _compositions(releases: Sequence[Release]) -> Counter[_Composition]:
    """Merge identical releases so each distinct mechanism is composed once, ``n`` times.

    A subsampled Gaussian entry contributes ``count`` compositions; a tree entry is one
    tree with ``count`` leaves (its sample rate is ignored: no amplification is claimed).
    """
    merged: Counter[_Composition] = Counter()
    for r in releases:
        if r.sampling == "full" and r.sample_rate != 1.0:
            raise ValueError(
                f"release {r.label!r}: sampling='full' needs sample_rate=1.0, got "
                f"{r.sample_rate}; record Poisson sampling as sampling='poisson'"
            )
        if r.mechanism == TREE_AGGREGATION:
            merged[(r.mechanism, r.noise_multiplier, 1.0, r.count)] += 1
        else:
            merged[(r.mechanism, r.noise_multiplier, r.sample_rate, 0)] += r.count
    return merged


def _dp_event(compositions: Counter[_Composition]) -> DpEvent:
    import dp_accounting as dpa

    events = []
    for (mechanism, sigma, q, leaves), n in compositions.items():
        if mechanism == TREE_AGGREGATION:
            event: DpEvent = dpa.SingleEpochTreeAggregationDpEvent(sigma, leaves)
        elif q == 1.0:
            event = dpa.GaussianDpEvent(sigma)
        else:
            event = dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(sigma))
        events.append(dpa.SelfComposedDpEvent(event, n))
    return dpa.ComposedDpEvent(events)


def _dp_accounting_epsilon(
    accountant: PrivacyAccountant, compositions: Counter[_Composition], delta: float
) -> float:
    accountant.compose(_dp_event(compositions))
    return float(accountant.get_epsilon(delta))


def _rdp(compositions: Counter[_Composition], delta: float) -> float:
    from dp_accounting import NeighboringRelation
    from dp_accounting.rdp import RdpAccountant

    # dp-accounting accepts tree aggregation only under "replace with a special (zero)
    # record"; the (subsampled) Gaussian RDP is the same there as under add/remove.
    accountant = RdpAccountant(neighboring_relation=NeighboringRelation.REPLACE_SPECIAL)
    return _dp_accounting_epsilon(accountant, compositions, delta)


def _pld(compositions: Counter[_Composition], delta: float) -> float:
    from dp_accounting.pld import PLDAccountant

    accountant = PLDAccountant(value_discretization_interval=PLD_DISCRETISATION)
    return _dp_accounting_epsilon(accountant, compositions, delta)


def _prv(compositions: Counter[_Composition], delta: float) -> float:
    import numpy as np
    from opacus.accountants import PRVAccountant

    accountant = PRVAccountant()
    accountant.history = [(sigma, q, n) for (_, sigma, q, _), n in compositions.items()]
    with warnings.catch_warnings(), np.errstate(divide="ignore"):
        # q = 1 makes opacus take log(0) (harmless, masked out); its RDP-based domain
        # bound may use the largest order, which only widens the (still safe) domain.
        warnings.filterwarnings("ignore", message="Optimal order is the largest alpha")
        return float(accountant.get_epsilon(delta, eps_error=PRV_EPS_ERROR))


_COMPOSERS: dict[str, Callable[[Counter[_Composition], float], float]] = {
    "rdp": _rdp,
    "prv": _prv,
    "pld": _pld,
}


def epsilon_from_ledger(
    releases: Sequence[Release], delta: float, accountant: str = "rdp"
) -> float:
    """ε at ``delta`` of all ledger releases composed; ∞ if any is non-private, 0 if none.

    A grouped ledger (``client_sample`` runs) reports its worst group's ε
    (:func:`group_epsilons`). Tree aggregation is supported by ``rdp`` only;
    ``prv``/``pld`` raise ValueError.
    """
    _check_choice("accountant", accountant, ACCOUNTANTS)
    _check_delta(delta)
    if any(r.groups for r in releases):
        return max(group_epsilons(releases, delta, accountant).values())
    return _composed_epsilon(releases, delta, accountant)


def _composed_epsilon(releases: Sequence[Release], delta: float, accountant: str) -> float:
    """ε of ``releases``: parallel over the parts of their partition (at most one), and
    within a part, pure ε plus the Gaussian releases' ε at ``delta``."""
    if any(r.mechanism == NONPRIVATE for r in releases):
        return math.inf
    partitions = {r.partition for r in releases if r.partition}
    if len(partitions) > 1:
        raise ValueError(
            f"releases on more than one partition ({sorted(partitions)}) cannot be composed "
            "in parallel: a unit's parts in two partitions are not disjoint releases"
        )
    shared = [r for r in releases if not r.partition]
    parts: dict[int, list[Release]] = {}
    for r in releases:
        if r.partition:
            parts.setdefault(r.part, []).append(r)
    if not parts:
        return _sequential_epsilon(shared, delta, accountant)
    return max(_sequential_epsilon(shared + part, delta, accountant) for part in parts.values())


def _sequential_epsilon(releases: Sequence[Release], delta: float, accountant: str) -> float:
    pure = sum(r.count * r.epsilon for r in releases if r.mechanism in PURE)
    gaussian = [r for r in releases if r.mechanism not in (*PURE, UNCHARGED)]
    if not gaussian:
        return pure
    compositions = _compositions(gaussian)
    if accountant != "rdp" and any(c[0] == TREE_AGGREGATION for c in compositions):
        raise ValueError(
            f"accountant {accountant!r} cannot account for tree_aggregation releases; "
            "use accountant='rdp'"
        )
    return pure + _COMPOSERS[accountant](compositions, delta)


def group_epsilons(
    releases: Sequence[Release], delta: float, accountant: str = "rdp"
) -> dict[str, float]:
    """ε of each client group of a grouped ledger (paper 001's accounting, §1.4).

    Each group's releases are split into phases by ``label``. A phase is accounted at
    δ / (the group's number of phases), and the group's ε is the sum of its phases' ε:
    basic composition, with δ split evenly, so a spec δ of 1/(N log N) gives paper 001's
    δ = 1/(2N log N) per phase for a client in two phases. Within a phase the releases
    are composed by ``accountant``, except that a phase made only of full-participation
    Gaussian releases is accounted exactly as one Gaussian release (Balle & Wang 2018;
    T releases of noise σ are one of noise σ/√T), which is how paper 001 calibrates its
    profiles and votes. Every release must name its groups.
    """
    _check_choice("accountant", accountant, ACCOUNTANTS)
    _check_delta(delta)
    if not all(r.groups for r in releases):
        raise ValueError("a grouped ledger needs every release to name its client groups")
    phases: dict[str, dict[str, list[Release]]] = {}
    for release in releases:
        for group in release.groups:
            phases.setdefault(group, {}).setdefault(release.label, []).append(release)
    return {
        group: sum(
            _phase_epsilon(phase, delta / len(by_label), accountant) for phase in by_label.values()
        )
        for group, by_label in sorted(phases.items())
    }


def _phase_epsilon(releases: list[Release], delta: float, accountant: str) -> float:
    exact = all(r.mechanism == SUBSAMPLED_GAUSSIAN and r.sample_rate == 1.0 for r in releases)
    if not exact:
        return _composed_epsilon(releases, delta, accountant)
    # Gaussians of noise σ_i (in units of the sensitivity) compose to one of noise
    # (Σ count_i / σ_i²)^(-1/2).
    precision = sum(r.count / r.noise_multiplier**2 for r in releases)
    return analytic_gaussian_epsilon(precision**-0.5, delta)


def _release(noise_multiplier: float, sample_rate: float, steps: int, mechanism: str) -> Release:
    _check_choice("mechanism", mechanism, SOLVABLE_MECHANISMS)
    _check_positive("noise_multiplier", noise_multiplier)
    if not 0.0 < sample_rate <= 1.0:
        raise ValueError(f"sample_rate must be in (0, 1], got {sample_rate}")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be an integer >= 1, got {steps!r}")
    return Release(
        mechanism=mechanism,
        noise_multiplier=noise_multiplier,
        sensitivity=1.0,
        sample_rate=sample_rate,
        count=steps,
        label=mechanism,
        sampling="full" if sample_rate == 1.0 else "poisson",
    )


def epsilon(
    noise_multiplier: float,
    sample_rate: float,
    steps: int,
    delta: float,
    accountant: str = "rdp",
    mechanism: str = SUBSAMPLED_GAUSSIAN,
) -> float:
    """ε of ``steps`` Gaussian releases at Poisson rate ``sample_rate`` (1 = everyone),
    or, with ``mechanism='tree_aggregation'``, of one single-epoch tree with ``steps`` leaves.
    """
    release = _release(noise_multiplier, sample_rate, steps, mechanism)
    return epsilon_from_ledger([release], delta, accountant)


def noise_multiplier_for(
    epsilon: float,
    delta: float,
    sample_rate: float,
    steps: int,
    accountant: str = "rdp",
    mechanism: str = SUBSAMPLED_GAUSSIAN,
) -> float:
    """Smallest noise multiplier σ whose ε (same arguments as :func:`epsilon`) is ≤ ``epsilon``.

    Bisection that keeps a feasible upper end, so the returned σ always satisfies the
    budget; it is within a relative :data:`SIGMA_RTOL` (0.01 %) of the smallest such σ.
    σ is searched in [:data:`SIGMA_MIN`, :data:`SIGMA_MAX`]; a target outside that
    range raises ValueError.
    """
    target = epsilon
    _check_positive("epsilon", target)
    _check_delta(delta)
    _check_choice("accountant", accountant, ACCOUNTANTS)
    _release(1.0, sample_rate, steps, mechanism)  # validates the remaining arguments

    def feasible(sigma: float) -> bool:
        release = _release(sigma, sample_rate, steps, mechanism)
        return epsilon_from_ledger([release], delta, accountant) <= target

    lo = hi = 1.0
    if feasible(hi):
        while feasible(lo):
            if lo <= SIGMA_MIN:
                raise ValueError(
                    f"epsilon={target} is so large that noise_multiplier={SIGMA_MIN} already "
                    "meets it; use a smaller epsilon"
                )
            hi, lo = lo, max(lo / 2, SIGMA_MIN)
    else:
        while not feasible(hi):
            if hi >= SIGMA_MAX:
                raise ValueError(
                    f"epsilon={target} cannot be reached with noise_multiplier <= {SIGMA_MAX}; "
                    "use a larger epsilon or delta"
                )
            lo, hi = hi, min(hi * 2, SIGMA_MAX)
    while hi - lo > SIGMA_RTOL * hi:
        mid = (lo + hi) / 2
        if feasible(mid):
            hi = mid
        else:
            lo = mid
    return hi


def noise_multiplier_for_parts(
    target: float,
    delta: float,
    schedules: Sequence[tuple[float, int]],
    accountant: str = "rdp",
    mechanism: str = SUBSAMPLED_GAUSSIAN,
) -> float:
    """Smallest σ (within :data:`SIGMA_RTOL`) under which every ``(sample_rate, steps)``
    schedule, each run on its own disjoint part of the units (parallel composition: the
    worst part counts), stays within ε = ``target``.

    The first schedule's σ is raised only for a schedule that exceeds ``target`` under
    it: ε falls as σ grows, so the largest of those σ keeps every schedule within.
    """
    if not schedules:
        raise ValueError("schedules: need at least one (sample_rate, steps)")
    (rate, steps), *rest = dict.fromkeys(schedules)
    sigma = noise_multiplier_for(target, delta, rate, steps, accountant, mechanism)
    for rate, steps in rest:
        if epsilon(sigma, rate, steps, delta, accountant, mechanism) > target:
            sigma = noise_multiplier_for(target, delta, rate, steps, accountant, mechanism)
    return sigma


def analytic_gaussian_delta(sigma: float, epsilon: float, sensitivity: float = 1.0) -> float:
    """Smallest δ for which one Gaussian release of std ``sigma`` is (ε, δ)-DP.

    Balle & Wang (2018), Theorem 8: δ = Φ(Δ/2σ − εσ/Δ) − e^ε Φ(−Δ/2σ − εσ/Δ),
    the second term evaluated in log space so large ε does not overflow.
    """
    from scipy.stats import norm

    _check_positive("sigma", sigma)
    _check_positive("sensitivity", sensitivity)
    if not (math.isfinite(epsilon) and epsilon >= 0):
        raise ValueError(f"epsilon must be a finite number >= 0, got {epsilon}")
    a = sensitivity / (2 * sigma)
    b = epsilon * sigma / sensitivity
    return float(norm.cdf(a - b) - math.exp(epsilon + norm.logcdf(-a - b)))


def analytic_gaussian_epsilon(sigma: float, delta: float, sensitivity: float = 1.0) -> float:
    """Exact ε of one Gaussian release of std ``sigma`` at ``delta`` (0 if δ(0) ≤ delta)."""
    from scipy.optimize import brentq

    _check_delta(delta)

    def excess(eps: float) -> float:  # falls as ε grows
        return analytic_gaussian_delta(sigma, eps, sensitivity) - delta

    if excess(0.0) <= 0:
        return 0.0
    hi = 1.0
    while excess(hi) > 0:
        hi *= 2
    return float(brentq(excess, 0.0, hi, xtol=1e-12))


def analytic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """Smallest noise std making one Gaussian release of L2 ``sensitivity`` (ε, δ)-DP."""
    from scipy.optimize import brentq

    _check_positive("epsilon", epsilon)
    _check_delta(delta)
    _check_positive("sensitivity", sensitivity)
    # δ depends on σ/Δ only and falls as σ grows: solve at Δ = 1, then scale.

    def excess(sigma: float) -> float:
        return analytic_gaussian_delta(sigma, epsilon) - delta

    lo = hi = 1.0
    while excess(lo) <= 0:
        lo /= 2
    while excess(hi) > 0:
        hi *= 2
    return float(brentq(excess, lo, hi, xtol=1e-12)) * sensitivity
