"""The ``canary`` metric: the one-run audit's ε lower bound of a release (Steinke, Nasr &
Jagielski 2023; statistics in :mod:`benchmark.privacy.audit`, canaries inserted by
:mod:`benchmark.federation.canaries`).

Listing this metric in a spec is what makes the runner insert canaries; the evaluator,
which alone holds the inclusion bits (``EvalContext.canaries``), scores every canary on the
release and reports the largest ε the guesses refute at 95 % confidence, beside the
ceiling that m canaries can show at all. A bound above the accounted ε means the release
reveals more than its ledger says: the leaderboard flags such an entry.

The canaries are real train units (:mod:`benchmark.federation.canaries`), each with its own
records. Scores ("higher = more likely included"), a function of the release, the canary's
records and public data only, one per canary (the mean or the best over its records):

- a released model, or the downstream LM trained on released texts: the mean over the
  canary's texts of their token loss under the public start (what released texts are
  fine-tuned from and the federated methods start from) minus under that LM
  (:func:`loss_difference_scores`; a model on a vocabulary of its own has no start in that
  vocabulary, so its score is minus its loss);
- a release with texts (or pairs), in addition, the copy score: a canary whose text the
  release copies by the verbatim detector's rule (:func:`benchmark.evaluation.verbatim.
  matched_mask`) ranks above every canary it does not copy, and within each group the
  canary's highest cosine similarity to a released text orders them
  (:func:`max_cosine_scores`). So the detector and the audit back each other: a copied
  canary counts in both. The reported bound is the larger of the two audits, each at β/2
  (a union bound keeps 95 % overall);
- on a preference split (paper 003) the canaries are tuples and the loss score is replaced
  by the downstream policy's implicit DPO margin on the canary's tuples, PREMIA's score: a
  policy aligned on pairs that carry a canary, or fine-tuned on it (DP-FT), prefers its
  chosen reply.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from benchmark.artifact import INSTRUMENT, Artifact
from benchmark.data import TEXT
from benchmark.evaluation.base import DOWNSTREAM_KINDS, EvalContext, Metric, MetricNotApplicable
from benchmark.evaluation.downstream import sequence_losses
from benchmark.evaluation.preference_audit import implicit_margins
from benchmark.evaluation.verbatim import (
    PAIR_FIELDS,
    KeyIndex,
    matched_mask,
    record_texts,
    released_texts,
)
from benchmark.privacy.audit import (
    BETA,
    AuditResult,
    audit,
    loss_difference_scores,
    max_cosine_scores,
)


class CanaryAudit(Metric):
    name = "canary"
    kinds = (*DOWNSTREAM_KINDS, "preferences")

    @classmethod
    def models_for(cls, kind: str, settings: dict[str, Any]) -> tuple[str, ...]:
        """A preference release's canaries are scored by the policy's margins; the others'
        by the downstream LM's losses and the embedder's nearest released text."""
        if kind == "preferences":
            return ("preference_policy",)
        return ("ondevice_lm", "embedder") if kind in cls.kinds else ()

    def __init__(self, beta: float = BETA) -> None:
        if not 0 < beta < 1:
            raise ValueError(f"canary beta must lie in (0, 1), got {beta!r}")
        super().__init__(beta=beta)
        self.beta = beta

    def compute(self, artifact: Artifact, ctx: EvalContext) -> dict[str, float]:
        plan = ctx.canaries
        if plan is None:
            raise MetricNotApplicable("this run inserted no canaries")
        included = np.array(plan.included)
        if _preference_tuples(ctx):
            audits = {"margin": self._margin_scores(artifact, ctx, plan.units)}
        else:
            audits = {"loss": self._loss_scores(artifact, ctx, plan.units)}
        released = released_texts(artifact)
        if released:
            audits["copy"] = copy_scores(ctx, plan.units, released)
        level = self.beta / len(audits)
        results = {k: audit(s, included, plan.delta, level) for k, s in audits.items()}
        score, best = max(results.items(), key=lambda kv: kv[1].epsilon_lower_bound)
        self.record(score=score, blind=plan.blind, m=best.m)
        return summary(best)

    def _loss_scores(self, artifact: Artifact, ctx: EvalContext, units: Units) -> np.ndarray:
        texts, owner = flattened([[r[TEXT] for r in unit] for unit in units])
        target = ctx.downstream_result(artifact)
        cfg = ctx.downstream

        def losses(model: Any) -> np.ndarray:
            return sequence_losses(
                model, target.tokenizer, texts, cfg.max_length, cfg.eval_batch_size
            )

        release = losses(target.model)
        if artifact.tokenizer not in INSTRUMENT:
            return per_canary(-release, owner, len(units), np.nanmean)
        start = ctx.start_model() if ctx.start_model else ctx.profile.ondevice_lm().new_model(0)
        scores = loss_difference_scores(release, losses(start))
        return per_canary(scores, owner, len(units), np.nanmean)

    def _margin_scores(self, artifact: Artifact, ctx: EvalContext, units: Units) -> np.ndarray:
        from benchmark.preference_training import AlignmentConfig

        pairs, owner = flattened([[{f: r[f] for f in PAIR_FIELDS} for r in u] for u in units])
        tokens = AlignmentConfig(**ctx.downstream.alignment).max_completion_tokens
        margins = implicit_margins(ctx, artifact, pairs, tokens)
        return per_canary(margins, owner, len(units), np.nanmean)


Units = tuple[tuple[dict[str, Any], ...], ...]


def copy_scores(ctx: EvalContext, units: Units, released: list[str]) -> np.ndarray:
    """Per canary: 2 when the release copies one of its texts (the verbatim detector's
    rule), plus the share of its texts copied, plus its best cosine similarity to a released
    text (in [-1, 1]): every copied canary outranks every other, cosine orders the rest."""
    texts, owner = flattened([record_texts(unit) for unit in units])
    public = KeyIndex(record_texts(ctx.split.records("public")))
    copied = np.array(matched_mask(texts, released, public), dtype=float)
    share = per_canary(copied, owner, len(units), np.mean)
    nearest = max_cosine_scores(ctx.embed(texts), ctx.embed(released))
    return 2.0 * (share > 0) + share + per_canary(nearest, owner, len(units), np.max)


def flattened(groups: list[list[Any]]) -> tuple[list[Any], np.ndarray]:
    """The items of ``groups`` in one list, and the group index of each."""
    items = [item for group in groups for item in group]
    owner = np.repeat(np.arange(len(groups)), [len(g) for g in groups])
    return items, owner


def per_canary(values: np.ndarray, owner: np.ndarray, m: int, reduce: Any) -> np.ndarray:
    """``reduce`` of each canary's values; NaN (an abstention) for a canary with none."""
    values = np.asarray(values, float)
    out = np.full(m, np.nan)
    for i in range(m):
        mine = values[owner == i]
        if len(mine) and not np.isnan(mine).all():
            out[i] = reduce(mine[~np.isnan(mine)])
    return out


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
