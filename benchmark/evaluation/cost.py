"""Communication and compute cost of a run (paper 000 Table 2, paper 004 Table 6).

The client pool counts these while the method runs; the evaluator only passes them through
under fixed names, so cost columns mean the same thing for every method. Expected counters:
``floats_down_per_client_round``, ``texts_down_per_client_round``,
``floats_up_per_client_round``, ``participations``, ``releases`` (any other numeric counter
is passed through unchanged). All are computed by the trusted side from public facts
(:mod:`benchmark.federation.costs`); none is a measured time: client code decides how long
it runs, so a client time would carry what it read. Records written before issue 33 also
hold ``client_seconds``, ``client_seconds_per_client_round`` and ``server_seconds``.
"""

from __future__ import annotations

from numbers import Real

from benchmark.artifact import Artifact
from benchmark.evaluation.base import EvalContext, Metric


class Cost(Metric):
    """The pool's numeric counters as floats; counters the pool did not report stay absent
    (a missing counter is unknown, not zero)."""

    name = "cost"

    def compute(self, artifact: Artifact, ctx: EvalContext) -> dict[str, float]:
        return {
            key: float(value)
            for key, value in ctx.costs.items()
            if isinstance(value, Real) and not isinstance(value, bool)
        }
