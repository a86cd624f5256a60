"""The ``canary`` metric: the one-run audit's ε lower bound of a release (Steinke, Nasr &
Jagielski 2023; statistics in :mod:`benchmark.privacy.audit`, canaries inserted by
:mod:`benchmark.federation.canaries`).

Listing this metric in a spec is what makes the runner insert canaries; the evaluator,
which alone holds the inclusion bits (``EvalContext.canaries``), scores every canary on the
release and reports the largest ε the guesses refute at 95 % confidence, beside the
ceiling that m canaries can show at all. A bound above the accounted ε means the release
reveals more than its ledger says: the leaderboard flags such an entry.

Scores ("higher = more likely included"), a function of the release and public data only:

- a released model, or the downstream LM trained on released texts: the canary's mean
  token loss under the public start (what released texts are fine-tuned from and the
  federated methods start from) minus under that LM (:func:`loss_difference_scores`;
  a model on a vocabulary of its own has no start in that vocabulary, so its score is
  minus its loss);
- a released text set, in addition: the canary's highest cosine similarity to a released
  text (:func:`max_cosine_scores`), which a copied canary maximises. The reported bound is
  the larger of the two audits, each at β/2 (a union bound keeps 95 % overall);
- on a preference split (paper 003) the canaries are tuples (:func:`canary_pair`) and the
  score is the downstream policy's implicit DPO margin on them, PREMIA's score: a policy
  aligned on pairs that carry a canary, or fine-tuned on it (DP-FT), prefers its chosen
  half.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from benchmark.artifact import INSTRUMENT, Artifact
from benchmark.evaluation.base import DOWNSTREAM_KINDS, EvalContext, Metric, MetricNotApplicable
from benchmark.evaluation.downstream import sequence_losses
from benchmark.evaluation.preference_audit import implicit_margins
from benchmark.federation.canaries import PAIR_FIELDS, canary_pair
from benchmark.privacy.audit import (
    BETA,
    AuditResult,
    audit,
    loss_difference_scores,
    max_cosine_scores,
)

MARKER_TOKENS = 32  # a canary's chosen half (four words) fits


class CanaryAudit(Metric):
    name = "canary"
    kinds = (*DOWNSTREAM_KINDS, "preferences")

    def __init__(self, beta: float = BETA) -> None:
        if not 0 < beta < 1:
            raise ValueError(f"canary beta must lie in (0, 1), got {beta!r}")
        super().__init__(beta=beta)
        self.beta = beta

    def compute(self, artifact: Artifact, ctx: EvalContext) -> dict[str, float]:
        plan = ctx.canaries
        if plan is None:
            raise MetricNotApplicable("this run inserted no canaries")
        texts, included = list(plan.texts), np.array(plan.included)
        if _preference_tuples(ctx):
            pairs = [canary_pair(t) for t in texts]
            audits = {"margin": implicit_margins(ctx, artifact, pairs, MARKER_TOKENS)}
        else:
            audits = {"loss": self._loss_scores(artifact, ctx, texts)}
        if artifact.kind in ("texts", "labelled_texts"):
            released = ctx.embed(ctx.release_texts(artifact, self.name))
            audits["cosine"] = max_cosine_scores(ctx.embed(texts), released)
        level = self.beta / len(audits)
        results = {k: audit(s, included, plan.delta, level) for k, s in audits.items()}
        score, best = max(results.items(), key=lambda kv: kv[1].epsilon_lower_bound)
        self.record(score=score, blind=plan.blind, m=best.m)
        return summary(best)

    def _loss_scores(self, artifact: Artifact, ctx: EvalContext, texts: list[str]) -> Any:
        target = ctx.downstream_result(artifact)
        cfg = ctx.downstream

        def losses(model: Any) -> np.ndarray:
            return sequence_losses(
                model, target.tokenizer, texts, cfg.max_length, cfg.eval_batch_size
            )

        release = losses(target.model)
        if artifact.tokenizer not in INSTRUMENT:
            return -release
        start = ctx.start_model() if ctx.start_model else ctx.profile.ondevice_lm().new_model(0)
        return loss_difference_scores(release, losses(start))


def _preference_tuples(ctx: EvalContext) -> bool:
    """Whether the run's units are preference tuples (the canaries then are tuples too)."""
    train = ctx.split.records("train")
    return bool(train) and all(k in train[0] for k in PAIR_FIELDS)


def summary(result: AuditResult) -> dict[str, float]:
    """The record's numbers: the bound, the ceiling m canaries allow, and the guesses."""
    return {
        "epsilon_lower_bound": float(result.epsilon_lower_bound),
        "epsilon_ceiling": float(result.epsilon_ceiling),
        "canaries": float(result.m),
        "guesses": float(result.r),
        "correct": float(result.v),
    }
