"""Paper 003's two policy-level preference metrics: reward accuracy and PREMIA.

Both read the downstream policy's implicit DPO reward margin of a tuple (x, a⁺, a⁻):
m = [log π(a⁺|x) − log π_ref(a⁺|x)] − [log π(a⁻|x) − log π_ref(a⁻|x)], π the policy the
evaluator aligned on the release (``EvalContext.policy``) and π_ref the profile's untouched
``preference_policy``, the policy's starting point for every method (so the ε = 0 base model
has m = 0 everywhere).

- ``reward_accuracy``: the fraction of test tuples with m > 0 (ties count one half):
  DPO's implicit reward as a preference model (paper 003 B.6 reports a reward model's
  pairwise accuracy; the policy's implicit one applies to every release alike). Each
  tuple's verdict is kept (:func:`~benchmark.evaluation.client_counts.verdict_counts`), so
  the table's interval resamples the test tuples as well as the seeds.
- ``premia``: membership inference on preference data after Feng et al. (2025), the
  attack paper 003 Table 5 runs: the score of a tuple is its margin m, members are private
  train tuples, non-members test tuples (up to ``n`` = 1,000 each, seeded), and the result
  is the ROC AUC (0.5 = no leak). A method whose policy never saw the private tuples
  (DPPrefSyn's synthetic pairs) should sit near 0.5; one fine-tuned on them (DP-FT) above.
  Reported in the audit column beside the other entries' MIA AUC.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np
import torch

from benchmark.artifact import Artifact
from benchmark.data import CLIENT_ID
from benchmark.evaluation.base import EvalContext, Metric, MetricNotApplicable
from benchmark.evaluation.client_counts import verdict_counts
from benchmark.evaluation.mia import attack_auc
from benchmark.evaluation.sampling import shuffled_subset
from benchmark.preference_training import encode_pairs, reference_margins
from benchmark.profiles.cache import GENERATOR_MARGINS, cache_dir, save_array
from benchmark.profiles.hf_generator import context_length
from benchmark.profiles.packaged import distribution_version

PAIR_FIELDS = ("prompt", "chosen", "rejected")
BATCH = 8


def preference_tuples(ctx: EvalContext, part: str, n: int) -> list[tuple[str, dict[str, str]]]:
    """Up to ``n`` (client id, tuple) of ``part`` (seeded subset), or a refusal when it
    has none."""
    found = [
        (str(r[CLIENT_ID]), {k: str(r[k]) for k in PAIR_FIELDS})
        for r in ctx.split.records(part)
        if all(r.get(k) for k in PAIR_FIELDS)
    ]
    if not found:
        raise MetricNotApplicable(f"the {part!r} part has no prompt/chosen/rejected tuples")
    return shuffled_subset(found, n, ctx.seed)


def implicit_margins(
    ctx: EvalContext, artifact: Artifact, records: list[dict[str, str]], max_completion: int
) -> np.ndarray:
    """m per tuple (see the module docstring), batched, without gradients.

    A preference release without pairs leaves the policy untouched, so its
    margins are exactly 0 and are not computed."""
    if artifact.kind == "preferences" and not artifact.pairs:
        return np.zeros(len(records))
    model, tokenizer = ctx.policy(artifact)
    chosen, rejected = encode_pairs(tokenizer, records, max_completion, context_length(model))
    with torch.no_grad():
        policy = reference_margins(model, chosen, rejected, BATCH).double().numpy()
    return policy - generator_margins(ctx, records, max_completion)


def generator_margins(
    ctx: EvalContext, records: list[dict[str, str]], max_completion: int
) -> np.ndarray:
    """log π_ref(a⁺|x) − log π_ref(a⁻|x) under the profile's untouched preference policy.

    The same for every release evaluated on these tuples, so it is cached on disk (keyed
    by the policy, the tuples, the cut and the library versions) and computed once per
    suite rather than once per run. Only the trusted evaluator writes or reads it: the
    margins are statistics of private tuples, so no untrusted process may read them
    (:data:`~benchmark.profiles.cache.PRIVATE_ENTRIES`)."""
    generator = ctx.profile.preference_policy()
    payload = {
        "format": 1,
        "generator": generator.name,
        "pairs": records,
        "max_completion": max_completion,
        "libraries": {d: distribution_version(d) for d in ("torch", "transformers")},
    }
    key = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:32]
    path = cache_dir() / GENERATOR_MARGINS / f"{key}.npy"  # denied to untrusted processes
    if path.is_file():
        return np.load(path)
    model, tokenizer = generator.model, generator.tokenizer
    chosen, rejected = encode_pairs(tokenizer, records, max_completion, context_length(model))
    model.eval()
    margins = reference_margins(model, chosen, rejected, BATCH).double().numpy()
    save_array(path, margins)
    return margins


class _PolicyMetric(Metric):
    kinds = ("preferences", "model")
    models = ("preference_policy",)  # aligned, or the reference of a released model's margins

    def __init__(self, n: int = 1000, max_completion_tokens: int = 128, **settings: Any) -> None:
        super().__init__(n=n, max_completion_tokens=max_completion_tokens, **settings)
        self.n, self.max_completion_tokens = n, max_completion_tokens

    def margins(self, artifact: Artifact, ctx: EvalContext, part: str) -> np.ndarray:
        records = [pair for _, pair in preference_tuples(ctx, part, self.n)]
        key = ("implicit_margins", part, self.n, self.max_completion_tokens)
        return ctx.cached(
            artifact,
            key,
            lambda: implicit_margins(ctx, artifact, records, self.max_completion_tokens),
        )


class RewardAccuracy(_PolicyMetric):
    name = "reward_accuracy"

    def compute(self, artifact: Artifact, ctx: EvalContext) -> dict[str, Any]:
        m = self.margins(artifact, ctx, "test")
        accuracy = np.where(m > 0, 1.0, np.where(m == 0, 0.5, 0.0))
        # the seeded shuffle of every tuple, whose first len(m) are the ones scored
        every = [cid for cid, _ in preference_tuples(ctx, "test", None)]
        counts = verdict_counts(every, every[: len(m)], accuracy, "accuracy")
        return {
            "accuracy": float(accuracy.mean()),
            "n": float(len(m)),
            "per_client": {"test": counts.to_json()},
        }


class Premia(_PolicyMetric):
    name = "premia"

    def compute(self, artifact: Artifact, ctx: EvalContext) -> dict[str, float]:
        members = self.margins(artifact, ctx, "train")
        nonmembers = self.margins(artifact, ctx, "test")
        return {
            "auc": attack_auc(members, nonmembers),
            "members": float(len(members)),
            "nonmembers": float(len(nonmembers)),
        }
