"""Every named suite: the CPU tracks (:mod:`leaderboard.suites`) and the papers' grids on
the ``paper`` profile (:mod:`leaderboard.paper_suites`), looked up by name."""

from __future__ import annotations

from leaderboard.paper_suites import paper_suites
from leaderboard.suites import SUITES as CPU_SUITES
from leaderboard.suites import Suite

SUITES: dict[str, Suite] = {**CPU_SUITES, **paper_suites()}


def get_suite(name: str) -> Suite:
    if name not in SUITES:
        raise ValueError(f"unknown suite {name!r}; available: {sorted(SUITES)}")
    return SUITES[name]
