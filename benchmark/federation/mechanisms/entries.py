"""Ledger entries and the checks of declared noise, shared by the mechanisms."""

from __future__ import annotations

import math

from benchmark.privacy.errors import PrivacyError
from benchmark.privacy.ledger import LAPLACE, NONPRIVATE, SUBSAMPLED_GAUSSIAN, Release

CLIENT_SAMPLE = "client_sample"  # the privacy unit whose releases are per client, by group
# The largest clip norm or L1 bound a private release may declare: a sum of up to 1e8
# clipped rows then stays finite even in float32 (3.4e38), so whether it overflows cannot
# depend on the data (an overflow to inf is a bit no noise hides).
MAX_BOUND = 1e30


def exact_allowed(allow_nonprivate: bool, what: str) -> bool:
    """True if this run may make ``what`` (a non-private release), else a PrivacyError."""
    if not allow_nonprivate:
        raise PrivacyError(f"{what} is only allowed in a non-private run (privacy.epsilon: inf)")
    return True


def check_gaussian(clip_norm: float, noise_multiplier: float, allow_nonprivate: bool) -> bool:
    """Validate a declared Gaussian mechanism; True when it is a non-private release."""
    if noise_multiplier < 0 or math.isnan(noise_multiplier):
        raise PrivacyError(f"noise_multiplier must be >= 0, got {noise_multiplier}")
    if noise_multiplier == 0:
        return exact_allowed(allow_nonprivate, "a release without noise (noise_multiplier=0)")
    _check_bounded("a clip_norm", clip_norm)
    return False


def check_pure(epsilon: float, sensitivity: float, allow_nonprivate: bool) -> bool:
    """Validate a pure-ε mechanism's budget; True for an exact (non-private) release."""
    if math.isnan(epsilon) or epsilon <= 0:
        raise PrivacyError(f"epsilon must be > 0, got {epsilon}")
    if math.isinf(epsilon):
        return exact_allowed(allow_nonprivate, "an exact release (epsilon=inf)")
    _check_bounded("a bound", sensitivity)
    return False


def _check_bounded(what: str, value: float) -> None:
    """A private release's clip norm or L1 bound: finite, positive, at most MAX_BOUND."""
    if not (math.isfinite(value) and 0 < value <= MAX_BOUND):
        raise PrivacyError(f"a private release needs {what} in (0, {MAX_BOUND:g}], got {value}")


def gaussian_entry(
    nonprivate: bool,
    noise_multiplier: float,
    clip_norm: float,
    sample_rate: float,
    count: int,
    label: str,
    dim: int,
    unit: str,
    *,
    groups: tuple[str, ...] = (),
    sensitivity: float | None = None,
    partition: str = "",
    part: int = -1,
) -> Release:
    """The ledger entry of ``count`` (subsampled) Gaussian releases, or of a non-private
    one. ``sensitivity`` defaults to ``clip_norm`` for private releases and ∞ for
    non-private ones (``aggregate`` records its clip norm either way, as it always has)."""
    if sensitivity is None:
        sensitivity = math.inf if nonprivate else clip_norm
    return Release(
        mechanism=NONPRIVATE if nonprivate else SUBSAMPLED_GAUSSIAN,
        noise_multiplier=noise_multiplier,
        sensitivity=sensitivity,
        sample_rate=sample_rate,
        count=count,
        label=label,
        sampling="full" if sample_rate == 1 else "poisson",
        unit=unit,
        dim=dim,
        groups=groups,
        partition=partition,
        part=part,
    )


def pure_entry(
    nonprivate: bool,
    mechanism: str,
    epsilon: float,
    sensitivity: float,
    label: str,
    dim: int,
    unit: str,
) -> Release:
    """The ledger entry of one pure-ε release, or of a non-private one."""
    return Release(
        mechanism=NONPRIVATE if nonprivate else mechanism,
        noise_multiplier=0.0 if nonprivate or mechanism != LAPLACE else 1.0 / epsilon,
        sensitivity=math.inf if nonprivate else sensitivity,
        sample_rate=1.0,
        count=1,
        label=label,
        unit=unit,
        dim=dim,
        epsilon=0.0 if nonprivate else epsilon,
    )
