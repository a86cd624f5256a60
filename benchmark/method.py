"""The adapter interface every method implements, and the context the harness gives it.

A method is a round-based server program: ``setup`` → ``round`` × ``num_rounds()`` →
``finish``. Its state is picklable and saved after every round, so runs resume. It never
sees the private training clients: it gets a :class:`~benchmark.federation.pool.ClientPool`
(clipped, noised aggregates only), the public part of the split, and the validation part
(held-out clients, for model selection only). The test part is the evaluator's alone.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from benchmark.artifact import Artifact
from benchmark.federation.pool import ClientPool
from benchmark.federation.quarantine import Diagnostics
from benchmark.profiles import family
from benchmark.profiles.base import ModelProfile
from benchmark.spec import PrivacySpec, SpecError


@dataclass
class MethodContext:
    pool: ClientPool
    public: list[dict[str, Any]]
    validation: list[dict[str, Any]]
    profile: ModelProfile
    privacy: PrivacySpec
    seed: int
    work_dir: Path
    diagnostics: Diagnostics

    def rng(self, round_index: int, stream: int = 0) -> np.random.Generator:
        """Method randomness for one round; identical on resume."""
        return np.random.default_rng([self.seed, 1000 + round_index, stream])

    def noise_for(
        self,
        *,
        steps: int,
        sample_rate: float = 1.0,
        mechanism: str = "subsampled_gaussian",
        epsilon: float | None = None,
        delta: float | None = None,
        parts: Sequence[tuple[float, int]] = (),
    ) -> float:
        """Smallest noise multiplier whose ``steps`` releases stay within the budget (or
        within ``epsilon`` at ``delta``: one phase's share of it). ``parts``: the
        ``(sample_rate, steps)`` of further runs at the same σ, each on its own disjoint
        part of the units; σ keeps every one of them within too.

        Returns 0 for the non-private bound (ε = ∞); refuses ε = 0 (no private release).
        """
        from benchmark.privacy.accountants import noise_multiplier_for_parts

        eps = self.privacy.epsilon if epsilon is None else epsilon
        if math.isinf(self.privacy.epsilon) or math.isinf(eps):
            return 0.0
        if eps <= 0:
            raise SpecError("privacy.epsilon: 0 allows no private release; use public_only")
        return noise_multiplier_for_parts(
            eps,
            self.privacy.delta if delta is None else delta,
            [(sample_rate, steps), *parts],
            accountant=self.privacy.accountant,
            mechanism=mechanism,
        )


ROLES = ("method", "bound", "control")


class Method(ABC):
    """Base class of method adapters. ``configs`` holds one default config per profile.

    ``role`` says how a leaderboard treats the adapter's rows: ``method`` is ranked;
    ``bound`` (ε = 0 public-only, ε = ∞ non-private) anchors the gap-closed scale;
    ``control`` (the oracle) calibrates the instrument and is never ranked.

    ``post_processing`` names config keys read only in ``finish``, after the last private
    round (e.g. the release's sampling): runs that differ only in them share one run's
    private rounds (:mod:`benchmark.shared_rounds`), so tuning them costs no privacy.

    ``models`` declares the profile roles (:data:`benchmark.profiles.roles.ROLES`) the
    method's code and the pool operations it calls load: the coordinator resolves those
    before the sandboxed method process starts (which has no network and may not write the
    caches), loads no other, and the method process refuses a role not declared.
    """

    name: ClassVar[str]
    artifact_kind: ClassVar[str]
    configs: ClassVar[dict[str, dict[str, Any]]]
    privacy_units: ClassVar[tuple[str, ...]] = ("user",)
    role: ClassVar[str] = "method"
    models: ClassVar[tuple[str, ...]] = ()
    post_processing: ClassVar[tuple[str, ...]] = ()

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config

    @classmethod
    def resolve_config(cls, profile: str, params: dict[str, Any]) -> dict[str, Any]:
        """The profile's defaults overridden by ``params``; unknown keys are an error. A
        profile variant (``cpu-gemma``) takes its family's defaults."""
        defaults = cls.configs.get(family(profile))
        if defaults is None:
            raise SpecError(f"method {cls.name!r} has no config for profile {profile!r}")
        unknown = sorted(set(params) - set(defaults))
        if unknown:
            raise SpecError(
                f"method.params.{unknown[0]}: unknown parameter of {cls.name!r}; "
                f"allowed: {sorted(defaults)}"
            )
        return {**defaults, **params}

    @classmethod
    def hub_ids(cls, config: dict[str, Any]) -> tuple[str, ...]:
        """Hub models the method loads by id under ``config``, not through a profile role
        (e.g. a configured encoder): fetched with its roles before its sandbox starts."""
        return ()

    def require_counts(self, *keys: str) -> None:
        """Each param in ``keys`` is an integer >= 1 (a bool is not)."""
        for key in keys:
            value = self.config[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SpecError(f"method.params.{key}: expected an integer >= 1, got {value!r}")

    def require_positive(self, *keys: str) -> None:
        """Each param in ``keys`` is a finite number > 0."""
        for key in keys:
            value = self.config[key]
            number = isinstance(value, int | float) and not isinstance(value, bool)
            if not (number and math.isfinite(value) and value > 0):
                raise SpecError(f"method.params.{key}: expected a number > 0, got {value!r}")

    @abstractmethod
    def num_rounds(self) -> int:
        """Number of server rounds (0 for methods without federated rounds)."""

    def cache_requests(self, ctx: MethodContext) -> list[dict[str, Any]]:
        """Public-only generation this run will read from a cache, as data (e.g.
        :func:`benchmark.profiles.candidate_corpus.candidate_request`). The harness builds
        each one with its own models before setup, since a sandboxed method process may
        read the caches but never write what another run reads."""
        return []

    def setup(self, ctx: MethodContext) -> Any:
        """Initial state (picklable); runs before round 0."""
        return {}

    def round(self, ctx: MethodContext, state: Any, round_index: int) -> Any:
        """One server round; returns the new state."""
        raise NotImplementedError(f"{self.name} has rounds but no round()")

    @abstractmethod
    def finish(self, ctx: MethodContext, state: Any) -> Artifact:
        """Produce the released artifact from the final state."""
