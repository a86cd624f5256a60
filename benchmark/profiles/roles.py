"""The roles a profile fills (generator, embedder, on-device LM, ...) and how a run names
the ones it needs.

A method declares the roles its own code and the pool operations it calls load
(:attr:`benchmark.method.Method.models`); a metric declares those it loads for a kind of
release (:meth:`benchmark.evaluation.base.Metric.models_for`). The coordinator resolves a
run's declared roles before its sandboxed method process starts (that process reads the
caches and the hub cache, never writes them, and has no network), and loads nothing else:
on ``paper`` every role is a hub model of gigabytes, two of them vLLM engines.
"""

from __future__ import annotations

from collections.abc import Iterable

# Every role, in the order they are listed and resolved (each is a ModelProfile method).
ROLES = (
    "generator",
    "embedder",
    "ondevice_lm",
    "conditional_lm",
    "public_llm",
    "masked_filler",
    "preference_embedder",
    "preference_generator",
    "preference_policy",
)


class UndeclaredModelError(RuntimeError):
    """Method code asked the profile for a role its method did not declare."""


def check_roles(roles: Iterable[object], where: str) -> tuple[str, ...]:
    """``roles`` as known role names in :data:`ROLES` order, each once; an unknown name (a
    submitted adapter's declaration is data like any other) is a ``ValueError`` naming
    ``where``."""
    given = list(roles)
    unknown = [r for r in given if r not in ROLES]
    if unknown:
        raise ValueError(f"{where}: unknown model role(s) {unknown}; allowed: {list(ROLES)}")
    return tuple(r for r in ROLES if r in given)
