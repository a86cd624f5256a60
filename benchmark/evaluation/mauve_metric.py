"""MAUVE between real and synthetic texts (paper 001), with mauve-text on precomputed features.

The features (``features``) are the profile's sentence embedder's by default;
``conditional_lm`` (GPT-2 in ``paper``) or a hub model id (``openai-community/gpt2-large``)
featurise with a causal LM's last hidden state at the last token, as paper 001's GPT-2 and
GPT-2-large MAUVE scores do. Values under different featurizers are not comparable. All
mauve-text knobs are settings and are recorded; ``device_id=-1`` keeps mauve-text from ever
loading a model. mauve-text (GPL-3.0) is imported only when this metric runs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from importlib.metadata import version
from typing import Any

import numpy as np

from benchmark.artifact import Artifact
from benchmark.evaluation.base import TEXT_KINDS, EvalContext, Metric


@dataclass(frozen=True)
class MauveSettings:
    """mauve-text's clustering and scaling knobs, at its own defaults: the metric's settings
    and :func:`mauve_from_features`'s arguments."""

    num_buckets: int | str = "auto"
    kmeans_num_redo: int = 5
    kmeans_max_iter: int = 500
    kmeans_explained_var: float = 0.9
    mauve_scaling_factor: float = 5.0
    divergence_curve_discretization_size: int = 25


def mauve_from_features(
    p: np.ndarray, q: np.ndarray, seed: int = 25, settings: MauveSettings = MauveSettings()
) -> dict[str, float]:
    """MAUVE and frontier integral of two feature sets (p = real, q = synthetic)."""
    import mauve

    out = mauve.compute_mauve(
        p_features=np.asarray(p, dtype=np.float32),
        q_features=np.asarray(q, dtype=np.float32),
        device_id=-1,
        seed=seed,
        **asdict(settings),
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
    models = ("embedder",)

    @classmethod
    def models_for(cls, kind: str, settings: dict[str, Any]) -> tuple[str, ...]:
        """The embedder, or the conditional LM when it gives the features (a hub id
        there is loaded by id, not by a profile role)."""
        if kind not in cls.kinds:
            return ()
        return ("conditional_lm",) if settings.get("features") == "conditional_lm" else cls.models

    def __init__(
        self,
        max_samples: int = 5_000,
        reference_part: str = "test",
        features: str = "embedder",
        max_text_tokens: int = 1024,
        **mauve_settings: Any,
    ) -> None:
        """``mauve_settings``: the fields of :class:`MauveSettings`."""
        self.features, self.max_text_tokens = features, max_text_tokens
        self.mauve_settings = MauveSettings(**mauve_settings)
        lm_settings = {} if features == "embedder" else {"max_text_tokens": max_text_tokens}
        super().__init__(
            max_samples=max_samples,
            reference_part=reference_part,
            features=features,
            **lm_settings,
            **asdict(self.mauve_settings),
        )
        self.max_samples = max_samples
        self.reference_part = reference_part

    def compute(self, artifact: Artifact, ctx: EvalContext) -> dict[str, float]:
        synthetic, real = ctx.compared_sets(
            artifact, self.name, self.reference_part, self.max_samples
        )
        self.record(mauve_text=version("mauve-text"))
        if self.features == "embedder":
            self.record(featurizer=ctx.profile.embedder().name)
            p, q = ctx.embed(real), ctx.embed(synthetic)
        else:
            model, tokenizer, name = self._causal_lm(ctx)
            self.record(featurizer=name)
            p = lm_features(model, tokenizer, real, self.max_text_tokens)
            q = lm_features(model, tokenizer, synthetic, self.max_text_tokens)
        scores = mauve_from_features(p, q, seed=ctx.seed, settings=self.mauve_settings)
        return {**scores, "n_synthetic": float(len(synthetic)), "n_real": float(len(real))}

    def _causal_lm(self, ctx: EvalContext) -> tuple[Any, Any, str]:
        """``conditional_lm``: the profile's (GPT-2 in ``paper``, paper 001's first
        featurizer); otherwise a hub model id (``openai-community/gpt2-large``)."""
        if self.features == "conditional_lm":
            lm = ctx.profile.conditional_lm()
            return lm.new_model(0), lm.tokenizer, lm.name
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from benchmark.profiles.hub import from_hub

        model = from_hub(AutoModelForCausalLM.from_pretrained, self.features, "main")
        tokenizer = from_hub(AutoTokenizer.from_pretrained, self.features, "main")
        return model.to(ctx.profile.lm_device()).eval(), tokenizer, self.features


def lm_features(model: Any, tokenizer: Any, texts: list[str], max_tokens: int) -> np.ndarray:
    """MAUVE's text features from a causal LM: the last layer's hidden state at each
    text's last token (mauve-text's own featurisation), one text at a time, texts
    truncated to ``max_tokens`` tokens."""
    import torch

    from benchmark.evaluation.downstream import model_device

    config = model.config
    context = getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings", 0)
    max_tokens = min(max_tokens, context or max_tokens)  # never past the model's context
    rows, device = [], model_device(model)
    with torch.inference_mode():
        for text in texts:
            ids = tokenizer(text, truncation=True, max_length=max_tokens)["input_ids"] or [
                tokenizer.eos_token_id
            ]
            out = model(input_ids=torch.tensor([ids], device=device), output_hidden_states=True)
            rows.append(out.hidden_states[-1][0, -1].float().cpu().numpy())
    return np.stack(rows)
