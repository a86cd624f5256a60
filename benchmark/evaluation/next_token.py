"""Next-token top-1/top-3 accuracy and cross-entropy on the test clients (papers 000, 004)."""

from __future__ import annotations

from typing import Any

from benchmark.artifact import INSTRUMENT, Artifact
from benchmark.evaluation.base import DOWNSTREAM_KINDS, EvalContext, Metric, MetricNotApplicable


class NextTokenAccuracy(Metric):
    """Scores the downstream LM of the release (see ``downstream.py`` for the protocol).

    ``top1``/``top3`` are fractions in [0, 1], ``ce`` is the mean token cross-entropy in nats,
    all on the test part and for the validation-selected epoch only. ``validation_top1`` is
    the same model's accuracy on the validation clients: what a suite's hyper-parameter grid
    selects on (paper 000 C.1 tunes DP-FL lr and clip on its evaluation set).

    ``per_client`` holds, per part (``test``, ``validation``), the selected model's top-1
    hits and predicted tokens per client in sorted client-id order with a hash of that
    order (:class:`~benchmark.evaluation.client_counts.ClientCounts`): summed, they give
    ``top1`` exactly; resampled over clients, they give the paired bootstrap intervals of
    the leaderboard (:mod:`benchmark.evaluation.stats`). Not a number, so it stays out of
    the record's flat metrics and lives in its ``evaluation`` report.
    """

    name = "next_token"
    kinds = DOWNSTREAM_KINDS
    models = ("ondevice_lm",)

    def check_applicable(self, artifact: Artifact) -> None:
        """Only a release scored in the instrument's vocabulary: accuracy per token depends
        on what a token is (a small word vocabulary with <unk> makes prediction easy), so a
        model on another vocabulary is scored by ``in_vocab`` and never ranked here."""
        super().check_applicable(artifact)
        if artifact.tokenizer not in INSTRUMENT:
            raise MetricNotApplicable(
                f"next_token scores the instrument's vocabulary; this model names "
                f"{artifact.tokenizer!r} (see the in_vocab metric)"
            )

    def compute(self, artifact: Artifact, ctx: EvalContext) -> dict[str, Any]:
        result = ctx.downstream_result(artifact)
        return {
            "top1": result.test["top1"],
            "top3": result.test["top3"],
            "ce": result.test["ce"],
            "test_tokens": result.test["tokens"],
            "selected_epoch": float(result.selected_epoch),
            "validation_top1": result.validation["top1"],
            "per_client": {part: c.to_json() for part, c in sorted(result.clients.items())},
        }
