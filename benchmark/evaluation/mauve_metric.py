"""MAUVE between real and synthetic texts (paper 001), with mauve-text on precomputed features.

The featurizer is the profile's sentence embedder (paper 001 used GPT-2/GPT-2-large hidden
states; its absolute values are therefore not comparable with ours, only trends are). All
mauve-text knobs are settings and are recorded; ``device_id=-1`` keeps mauve-text from ever
loading a model. mauve-text (GPL-3.0) is imported only when this metric runs.
"""

from __future__ import annotations

from importlib.metadata import version

import numpy as np

from benchmark.artifact import Artifact
from benchmark.evaluation.base import TEXT_KINDS, EvalContext, Metric


def mauve_from_features(
    p: np.ndarray,
    q: np.ndarray,
    seed: int = 25,
    num_buckets: int | str = "auto",
    kmeans_num_redo: int = 5,
    kmeans_max_iter: int = 500,
    kmeans_explained_var: float = 0.9,
    mauve_scaling_factor: float = 5.0,
    divergence_curve_discretization_size: int = 25,
) -> dict[str, float]:
    """MAUVE and frontier integral of two feature sets (p = real, q = synthetic)."""
    import mauve

    out = mauve.compute_mauve(
        p_features=np.asarray(p, dtype=np.float32),
        q_features=np.asarray(q, dtype=np.float32),
        device_id=-1,
        seed=seed,
        num_buckets=num_buckets,
        kmeans_num_redo=kmeans_num_redo,
        kmeans_max_iter=kmeans_max_iter,
        kmeans_explained_var=kmeans_explained_var,
        mauve_scaling_factor=mauve_scaling_factor,
        divergence_curve_discretization_size=divergence_curve_discretization_size,
        verbose=False,
    )
    return {"mauve": float(out.mauve), "frontier_integral": float(out.frontier_integral)}


class MAUVE(Metric):
    """MAUVE of the released texts against the real ``reference_part`` texts of the split.

    Both sides are seeded-shuffled before being capped at ``max_samples`` (parts are stored
    client by client, and a topic-ordered prefix would make MAUVE measure topic shift).
    """

    name = "mauve"
    kinds = TEXT_KINDS

    def __init__(
        self,
        max_samples: int = 5_000,
        reference_part: str = "test",
        num_buckets: int | str = "auto",
        kmeans_num_redo: int = 5,
        kmeans_max_iter: int = 500,
        kmeans_explained_var: float = 0.9,
        mauve_scaling_factor: float = 5.0,
        divergence_curve_discretization_size: int = 25,
    ) -> None:
        self.mauve_settings = {
            "num_buckets": num_buckets,
            "kmeans_num_redo": kmeans_num_redo,
            "kmeans_max_iter": kmeans_max_iter,
            "kmeans_explained_var": kmeans_explained_var,
            "mauve_scaling_factor": mauve_scaling_factor,
            "divergence_curve_discretization_size": divergence_curve_discretization_size,
        }
        super().__init__(
            max_samples=max_samples, reference_part=reference_part, **self.mauve_settings
        )
        self.max_samples = max_samples
        self.reference_part = reference_part

    def compute(self, artifact: Artifact, ctx: EvalContext) -> dict[str, float]:
        synthetic, real = ctx.compared_sets(
            artifact, self.name, self.reference_part, self.max_samples
        )
        self.record(featurizer=ctx.profile.embedder().name, mauve_text=version("mauve-text"))
        scores = mauve_from_features(
            ctx.embed(real), ctx.embed(synthetic), seed=ctx.seed, **self.mauve_settings
        )
        return {**scores, "n_synthetic": float(len(synthetic)), "n_real": float(len(real))}
