"""Empirical privacy audit: membership inference on released models and text sets.

Members are private training records of the split, non-members are records of its held-out
clients (validation and test by default), both sampled with the evaluation seed in equal
numbers. Every attack score is "higher means member" and is summarised as ROC AUC: 0.5 is
chance, 1.0 is perfect membership recovery.

- ``mia`` attacks the downstream LM of the release (the released model itself, or the model
  fine-tuned on the released texts, shared with ``next_token``): a loss-threshold attack
  (Yeom et al. 2018) and a reference-calibrated attack that subtracts each record's loss
  under a model that never saw private data (the public starting point, or that start
  fine-tuned on the split's public part). Because held-out clients may differ in topic
  from training clients, ``reference_loss_auc`` runs the loss attack on the reference model:
  what a model without private data already "achieves", i.e. the distribution-shift floor.
- ``dcr`` attacks a released text set: a record's score is minus its embedding distance to
  the closest synthetic text; copied or paraphrased training records push the AUC to 1.
"""

from __future__ import annotations

import numpy as np
from sklearn.metrics import roc_auc_score

from benchmark.artifact import Artifact
from benchmark.evaluation.base import (
    DOWNSTREAM_KINDS,
    TEXT_KINDS,
    EvalContext,
    Metric,
    MetricNotApplicable,
)
from benchmark.evaluation.downstream import sequence_losses
from benchmark.evaluation.sampling import shuffled_subset

NONMEMBER_PARTS = ("validation", "test")


def attack_auc(member_scores: np.ndarray, nonmember_scores: np.ndarray) -> float:
    """ROC AUC of separating members (label 1) from non-members by score."""
    labels = np.r_[np.ones(len(member_scores)), np.zeros(len(nonmember_scores))]
    return float(roc_auc_score(labels, np.r_[member_scores, nonmember_scores]))


def loss_attack_auc(member_losses: np.ndarray, nonmember_losses: np.ndarray) -> float:
    return attack_auc(-np.asarray(member_losses), -np.asarray(nonmember_losses))


def calibrated_attack_auc(
    member_losses: np.ndarray,
    nonmember_losses: np.ndarray,
    member_reference: np.ndarray,
    nonmember_reference: np.ndarray,
) -> float:
    """Score = reference loss - target loss: how much more the target likes a record."""
    return attack_auc(
        np.asarray(member_reference) - np.asarray(member_losses),
        np.asarray(nonmember_reference) - np.asarray(nonmember_losses),
    )


def audit_samples(
    ctx: EvalContext, n_samples: int, seed: int, nonmember_parts: tuple[str, ...]
) -> tuple[list[str], list[str]]:
    """Equal-sized seeded samples of member (the run's train) and non-member (held-out)
    texts."""
    members = ctx.member_texts()
    nonmember_pool = [t for part in nonmember_parts for t in ctx.split.texts(part)]
    n = min(n_samples, len(members), len(nonmember_pool))
    if n < 2:
        raise MetricNotApplicable("membership inference needs >= 2 members and non-members")
    return (
        shuffled_subset(members, n, seed),
        shuffled_subset(nonmember_pool, n, seed + 1),
    )


def closest_distances(queries: np.ndarray, corpus: np.ndarray, chunk: int = 2048) -> np.ndarray:
    """Euclidean distance from each query row to its nearest corpus row (chunked matmul)."""
    q, c = np.asarray(queries, np.float64), np.asarray(corpus, np.float64)
    c_sq = (c * c).sum(axis=1)
    out = np.empty(len(q))
    for start in range(0, len(q), chunk):
        block = q[start : start + chunk]
        d2 = (block * block).sum(axis=1)[:, None] + c_sq[None, :] - 2.0 * block @ c.T
        out[start : start + chunk] = np.sqrt(np.clip(d2.min(axis=1), 0.0, None))
    return out


class MembershipInference(Metric):
    """Loss-threshold and reference-calibrated MIA AUC against the release's downstream LM."""

    name = "mia"
    kinds = DOWNSTREAM_KINDS
    models = ("ondevice_lm",)

    def __init__(
        self,
        n_samples: int = 500,
        reference: str = "start",
        nonmember_parts: tuple[str, ...] | list[str] = NONMEMBER_PARTS,
    ) -> None:
        if reference not in ("start", "public"):
            raise ValueError(f"mia reference must be 'start' or 'public', got {reference!r}")
        super().__init__(
            n_samples=n_samples, reference=reference, nonmember_parts=list(nonmember_parts)
        )
        self.n_samples, self.reference = n_samples, reference
        self.nonmember_parts = tuple(nonmember_parts)

    def _reference_model(self, artifact: Artifact, ctx: EvalContext):
        """The calibration model, or None where there is none: the public start is the
        profile's on-device LM, whose vocabulary a model on a named tokenizer does not share."""
        from benchmark.artifact import INSTRUMENT

        foreign = artifact.tokenizer not in INSTRUMENT
        if self.reference == "start":
            return None if foreign else ctx.profile.ondevice_lm().new_model(ctx.seed)
        if foreign:
            raise MetricNotApplicable(
                f"mia reference 'public' is the instrument's LM; the model names "
                f"{artifact.tokenizer!r} (use reference 'start': loss AUC only)"
            )
        public = ctx.split.texts("public")
        if not public:
            raise MetricNotApplicable("reference='public' needs a non-empty public part")
        return ctx.downstream_result(Artifact(kind="texts", texts=public)).model

    def compute(self, artifact: Artifact, ctx: EvalContext) -> dict[str, float]:
        members, nonmembers = audit_samples(ctx, self.n_samples, ctx.seed, self.nonmember_parts)
        target = ctx.downstream_result(artifact)
        cfg = ctx.downstream

        def losses(model) -> tuple[np.ndarray, np.ndarray]:
            return tuple(
                sequence_losses(model, target.tokenizer, texts, cfg.max_length, cfg.eval_batch_size)
                for texts in (members, nonmembers)
            )

        m, n = losses(target.model)
        keep_m, keep_n = ~np.isnan(m), ~np.isnan(n)
        result = {
            "loss_auc": loss_attack_auc(m[keep_m], n[keep_n]),
            "n_members": float(keep_m.sum()),
            "n_nonmembers": float(keep_n.sum()),
        }
        reference = self._reference_model(artifact, ctx)
        if reference is None:
            self.record(reference="none (the model names its own vocabulary)")
            return result
        m_ref, n_ref = losses(reference)
        return {
            **result,
            "calibrated_auc": calibrated_attack_auc(
                m[keep_m], n[keep_n], m_ref[keep_m], n_ref[keep_n]
            ),
            "reference_loss_auc": loss_attack_auc(m_ref[keep_m], n_ref[keep_n]),
        }


class DistanceToClosestRecord(Metric):
    """AUC of telling members from non-members by embedding distance to the released texts."""

    name = "dcr"
    kinds = TEXT_KINDS
    models = ("embedder",)

    def __init__(
        self, n_samples: int = 500, nonmember_parts: tuple[str, ...] | list[str] = NONMEMBER_PARTS
    ) -> None:
        super().__init__(n_samples=n_samples, nonmember_parts=list(nonmember_parts))
        self.n_samples, self.nonmember_parts = n_samples, tuple(nonmember_parts)

    def compute(self, artifact: Artifact, ctx: EvalContext) -> dict[str, float]:
        members, nonmembers = audit_samples(ctx, self.n_samples, ctx.seed, self.nonmember_parts)
        self.record(featurizer=ctx.profile.embedder().name)
        synthetic = ctx.embed(ctx.release_texts(artifact, self.name))
        d_members = closest_distances(ctx.embed(members), synthetic)
        d_nonmembers = closest_distances(ctx.embed(nonmembers), synthetic)
        return {
            "auc": attack_auc(-d_members, -d_nonmembers),
            "n_members": float(len(members)),
            "n_nonmembers": float(len(nonmembers)),
        }
