"""Errors raised when code crosses the privacy boundary or a budget."""


class PrivacyError(RuntimeError):
    """Server-side code tried to see private data or to skip clipping or noise."""


class BudgetExceededError(PrivacyError):
    """The ε computed from the ledger is larger than the run spec's budget."""

    def __init__(self, epsilon: float, budget: float, accountant: str) -> None:
        super().__init__(
            f"privacy budget exceeded: the ledger gives epsilon={epsilon:.4f} "
            f"({accountant} accountant) but the spec allows epsilon={budget:g}"
        )
        self.epsilon = epsilon
        self.budget = budget


class ReleaseRefused(PrivacyError):
    """A release that copies private texts beyond the natural rate (the verbatim detector,
    ``benchmark/evaluation/verbatim.py``): its record is kept, it is never published."""
