"""The privacy ledger: every noisy release the harness made during a run.

Only harness code appends to it (the client pool, the DP-SGD trainer, the tree
aggregator). ε is never reported by a method: it is recomputed from these entries by an
accountant (:mod:`benchmark.privacy.accountants`).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# Mechanisms the accountants understand.
SUBSAMPLED_GAUSSIAN = "subsampled_gaussian"  # count compositions of a (Poisson-)sampled Gaussian
TREE_AGGREGATION = "tree_aggregation"  # one single-epoch tree with `count` leaves (DP-FTRL)
NONPRIVATE = "nonprivate"  # a release without noise: ε = ∞
MECHANISMS = (SUBSAMPLED_GAUSSIAN, TREE_AGGREGATION, NONPRIVATE)
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

    def __post_init__(self) -> None:
        if self.mechanism not in MECHANISMS:
            raise ValueError(f"mechanism must be one of {MECHANISMS}, got {self.mechanism!r}")
        if self.sampling not in SAMPLINGS:
            raise ValueError(f"sampling must be one of {SAMPLINGS}, got {self.sampling!r}")
        if not 0.0 < self.sample_rate <= 1.0:
            raise ValueError(f"sample_rate must be in (0, 1], got {self.sample_rate}")
        if self.count < 1:
            raise ValueError(f"count must be >= 1, got {self.count}")
        if self.mechanism != NONPRIVATE and not (
            self.noise_multiplier > 0 and math.isfinite(self.sensitivity) and self.sensitivity > 0
        ):
            raise ValueError("a private release needs noise_multiplier > 0, finite sensitivity")


@dataclass
class PrivacyLedger:
    """Append-only list of releases, serialisable to JSON for resume and verification."""

    releases: list[Release] = field(default_factory=list)

    def record(self, release: Release) -> None:
        self.releases.append(release)

    @property
    def is_private(self) -> bool:
        return all(r.mechanism != NONPRIVATE for r in self.releases)

    def to_json(self) -> list[dict[str, Any]]:
        """Entries as JSON objects; ``groups`` only where set, so the records of ungrouped
        runs are what they were before groups existed."""
        entries = []
        for release in self.releases:
            entry = asdict(release)
            if release.groups:
                entry["groups"] = list(release.groups)
            else:
                del entry["groups"]
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
