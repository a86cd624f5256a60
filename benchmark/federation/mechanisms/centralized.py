"""The ε = ∞ bound's centralised access (``pool.centralized``): a function run on every
client's data at once, recorded as a non-private release (the ledger's ε becomes
infinite); refused in any private run."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from benchmark.federation.clients import ClientData
from benchmark.privacy.errors import PrivacyError
from benchmark.privacy.ledger import NONPRIVATE, Release

if TYPE_CHECKING:
    from benchmark.federation.pool import ClientPool


def centralized(
    pool: ClientPool, train_fn: Callable[[list[ClientData]], Any], *, label: str
) -> Any:
    """Run ``train_fn`` on every client's data at once (the ε = ∞ bound only)."""
    if not pool._allow_nonprivate:
        raise PrivacyError(
            "centralized access to client data is only allowed in a non-private run "
            "(privacy.epsilon: inf)"
        )

    def compute() -> Any:
        result = pool._executor.run_all(train_fn)
        pool._record(Release(NONPRIVATE, 0.0, math.inf, 1.0, 1, label, unit=pool._unit))
        return result

    return pool._delivered("centralized", {"label": label}, compute)
