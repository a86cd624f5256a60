"""The privacy ledger: every noisy release the harness made during a run.

Only harness code appends to it (the client pool, the DP-SGD trainer, the tree
aggregator). ε is never reported by a method: it is recomputed from these entries by an
accountant (:mod:`benchmark.privacy.accountants`).

Two families of mechanisms: Gaussian ones, described by a noise multiplier and composed
by the accountant at δ, and pure ε-DP ones (Laplace, the exponential mechanism), which
carry their ``epsilon`` and are added to the Gaussian part by basic composition (paper
003's accounting, §6 of its spec).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# Mechanisms the accountants understand.
SUBSAMPLED_GAUSSIAN = "subsampled_gaussian"  # count compositions of a (Poisson-)sampled Gaussian
TREE_AGGREGATION = "tree_aggregation"  # one single-epoch tree with `count` leaves (DP-FTRL)
NONPRIVATE = "nonprivate"  # a release without noise: ε = ∞
LAPLACE = "laplace"  # pure ε: Laplace noise of scale sensitivity/ε on an L1-bounded sum
EXPONENTIAL = "exponential"  # pure ε: the exponential mechanism (DP-PCA's eigenvectors)
PURE = (LAPLACE, EXPONENTIAL)
# An exact statistic released without charge: only in a `guarantee: simulated` run, where
# it keeps a paper's own (incomplete) accounting visible (paper 003's cluster histogram).
UNCHARGED = "uncharged"
MECHANISMS = (SUBSAMPLED_GAUSSIAN, TREE_AGGREGATION, NONPRIVATE, UNCHARGED, *PURE)
# Fields written to JSON only when set, so records made before they existed are unchanged.
OPTIONAL_FIELDS = {"groups": (), "epsilon": 0.0, "partition": "", "part": -1}
SAMPLINGS = ("full", "poisson")


@dataclass(frozen=True)
class Release:
    """One ledger entry: ``count`` identical compositions of one mechanism.

    ``noise_multiplier`` is the Gaussian noise std divided by ``sensitivity`` (the L2
    clip bound of one privacy unit's contribution). ``sample_rate`` is the Poisson
    sampling rate of privacy units (1.0 with full participation).

    ``groups`` names the client groups whose samples the release touches, in a
    ``client_sample`` run (paper 001: strong and weak clients pay for different phases);
    empty otherwise. A grouped ledger is accounted per group, by basic composition over
    its phases (entries sharing a ``label``); see
    :func:`benchmark.privacy.accountants.group_epsilons`.

    ``epsilon`` is the pure ε of one composition of a :data:`PURE` mechanism (its
    ``noise_multiplier`` is then 1/ε for Laplace and 0 for the exponential mechanism).

    ``partition`` and ``part`` mark a release that touches only the units of one part of
    a partition of the population that the units compute themselves (paper 003's
    per-cluster DP-SGD): a unit is in exactly one part, so the parts compose in parallel
    (the accountant takes the worst part).
    """

    mechanism: str
    noise_multiplier: float
    sensitivity: float
    sample_rate: float
    count: int
    label: str
    sampling: str = "full"
    unit: str = "user"
    dim: int = 0
    groups: tuple[str, ...] = ()
    epsilon: float = 0.0
    partition: str = ""
    part: int = -1

    def __post_init__(self) -> None:
        if self.mechanism not in MECHANISMS:
            raise ValueError(f"mechanism must be one of {MECHANISMS}, got {self.mechanism!r}")
        if self.sampling not in SAMPLINGS:
            raise ValueError(f"sampling must be one of {SAMPLINGS}, got {self.sampling!r}")
        if not 0.0 < self.sample_rate <= 1.0:
            raise ValueError(f"sample_rate must be in (0, 1], got {self.sample_rate}")
        if self.count < 1:
            raise ValueError(f"count must be >= 1, got {self.count}")
        if (self.mechanism in PURE) != (self.epsilon != 0.0):
            raise ValueError(f"epsilon is set for (and only for) the pure mechanisms {PURE}")
        if self.mechanism in PURE and not (math.isfinite(self.epsilon) and self.epsilon > 0):
            raise ValueError(f"a pure release needs a finite epsilon > 0, got {self.epsilon}")
        if self.mechanism in PURE and self.sample_rate != 1.0:
            raise ValueError("a pure release claims no amplification by sampling: sample_rate 1")
        noisy = self.noise_multiplier > 0 or self.mechanism in PURE
        if self.mechanism not in (NONPRIVATE, UNCHARGED) and not (
            noisy and math.isfinite(self.sensitivity) and self.sensitivity > 0
        ):
            raise ValueError("a private release needs noise_multiplier > 0, finite sensitivity")
        if bool(self.partition) != (self.part >= 0):
            raise ValueError("a partitioned release names both its partition and its part")


@dataclass
class PrivacyLedger:
    """Append-only list of releases, serialisable to JSON for resume and verification.

    ``guard`` (the run's budget, :class:`benchmark.privacy.budget.Budget`) is asked by
    :meth:`admit` before a release is computed: it raises if the ledger with the release
    would exceed the budget, so a refused release never touches private data."""

    releases: list[Release] = field(default_factory=list)
    guard: Callable[[Sequence[Release]], object] | None = field(
        default=None, repr=False, compare=False
    )

    def admit(self, *releases: Release) -> None:
        """Refuse ``releases`` (raise) if the ledger with them would exceed the budget."""
        if self.guard is not None:
            self.guard([*self.releases, *releases])

    def record(self, release: Release) -> None:
        self.releases.append(release)

    @property
    def is_private(self) -> bool:
        return all(r.mechanism != NONPRIVATE for r in self.releases)

    def to_json(self) -> list[dict[str, Any]]:
        """Entries as JSON objects; the :data:`OPTIONAL_FIELDS` only where set, so the
        records of runs that use none of them are what they were before they existed."""
        entries = []
        for release in self.releases:
            entry = asdict(release)
            for name, unset in OPTIONAL_FIELDS.items():
                if entry[name] == unset:
                    del entry[name]
            if "groups" in entry:
                entry["groups"] = list(release.groups)
            entries.append(entry)
        return entries

    @classmethod
    def from_json(cls, entries: list[dict[str, Any]]) -> PrivacyLedger:
        return cls([Release(**{**e, "groups": tuple(e.get("groups", ()))}) for e in entries])

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_json(), indent=1))

    @classmethod
    def load(cls, path: Path) -> PrivacyLedger:
        return cls.from_json(json.loads(path.read_text()))
