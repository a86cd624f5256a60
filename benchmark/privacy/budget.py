"""The run's privacy budget, checked against the ledger before every release is computed
(:meth:`benchmark.privacy.ledger.PrivacyLedger.admit`) and again after every round."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from benchmark.privacy.errors import BudgetExceededError
from benchmark.privacy.ledger import Release

TOLERANCE = 1e-9  # ε above the budget by at most this is within it (solver round-off)


@dataclass(frozen=True)
class Budget:
    """ε at δ, composed by ``accountant``; ``epsilon = inf`` is no budget."""

    epsilon: float
    delta: float
    accountant: str

    def spent(self, releases: Sequence[Release]) -> float:
        """ε of ``releases`` (:func:`benchmark.privacy.accountants.epsilon_from_ledger`)."""
        from benchmark.privacy.accountants import epsilon_from_ledger

        return epsilon_from_ledger(releases, self.delta, self.accountant)

    def check(self, releases: Sequence[Release]) -> float:
        """ε of ``releases``; :class:`BudgetExceededError` if it exceeds the budget."""
        spent = self.spent(releases)
        if not math.isinf(self.epsilon) and spent > self.epsilon + TOLERANCE:
            raise BudgetExceededError(spent, self.epsilon, self.accountant)
        return spent
