"""Every named suite, loaded from its file in ``leaderboard/suite_defs/``, looked up by name."""

from __future__ import annotations

from leaderboard.preparations import PREPARATIONS
from leaderboard.suite_files import load_suites
from leaderboard.suites import Suite

SUITES: dict[str, Suite] = load_suites(PREPARATIONS)


def get_suite(name: str) -> Suite:
    if name not in SUITES:
        raise ValueError(f"unknown suite {name!r}; available: {sorted(SUITES)}")
    return SUITES[name]
