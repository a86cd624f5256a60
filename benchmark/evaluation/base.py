"""The metric interface, the evaluation context shared by all metrics, and ``evaluate``.

Metrics only read what a method released (an :class:`~benchmark.artifact.Artifact`) plus the
split's held-out parts; they never see anything else a method computed. Expensive shared
work (embedding a text set, fine-tuning the downstream LM on the release) is done once per
context and reused by every metric that needs it, so ``next_token`` and ``mia`` train once.
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from benchmark.artifact import KINDS, Artifact
from benchmark.data import TEXT, FederatedSplit
from benchmark.evaluation.downstream import DownstreamConfig, DownstreamResult, run_downstream
from benchmark.evaluation.embedding_cache import EmbeddingCache
from benchmark.evaluation.sampling import shuffled_subset
from benchmark.federation.canaries import CanaryPlan
from benchmark.profiles.base import ModelProfile
from benchmark.progress import progress
from benchmark.registry import METRICS


class MetricNotApplicable(ValueError):
    """The metric does not apply to this kind of release (e.g. FID of a model without texts)."""


DOWNSTREAM_KINDS = ("texts", "labelled_texts", "model")  # releases with a downstream LM
TEXT_KINDS = DOWNSTREAM_KINDS  # releases with texts: their own, or sampled from the model


class Metric(ABC):
    """One registered metric; ``settings`` are recorded in the result next to the values."""

    name: ClassVar[str]
    kinds: ClassVar[tuple[str, ...]] = KINDS  # release kinds the metric can score
    models: ClassVar[tuple[str, ...]] = ()  # profile roles it loads (benchmark.profiles.roles)

    @classmethod
    def models_for(cls, kind: str, settings: dict[str, Any]) -> tuple[str, ...]:
        """The profile roles scoring a ``kind`` release with ``settings`` loads (``fedsynth
        models fetch`` and the suite plans list them; the evaluator loads on first use)."""
        return cls.models if kind in cls.kinds else ()

    def __init__(self, **settings: Any) -> None:
        self._settings = dict(settings)

    def settings(self) -> dict[str, Any]:
        return dict(self._settings)

    def record(self, **context_settings: Any) -> None:
        """Add settings only known at compute time (e.g. the profile's featurizer)."""
        self._settings.update(context_settings)

    def check_applicable(self, artifact: Artifact) -> None:
        """Raise :class:`MetricNotApplicable` when ``artifact`` cannot be scored by this metric."""
        if artifact.kind not in self.kinds:
            raise MetricNotApplicable(f"{self.name} applies to {self.kinds}, not {artifact.kind!r}")

    @abstractmethod
    def compute(self, artifact: Artifact, ctx: EvalContext) -> dict[str, float]: ...


def require_texts(artifact: Artifact, metric: str, minimum: int = 1) -> list[str]:
    """The released synthetic text set, or a clear refusal when it has fewer than ``minimum``."""
    if artifact.kind == "preferences" or not artifact.texts:
        raise MetricNotApplicable(f"{metric} needs a released text set; got kind {artifact.kind!r}")
    if len(artifact.texts) < minimum:
        raise MetricNotApplicable(f"{metric} needs at least {minimum} released texts")
    return list(artifact.texts)


def artifact_key(artifact: Artifact) -> str:
    """Content hash of a release, so equal releases share cached downstream training."""
    blob = json.dumps(asdict(artifact), sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()


@dataclass
class EvalContext:
    """Everything a metric may use besides the release itself.

    ``costs`` are the client pool's counters for the run (empty when a method used no pool).
    ``work_dir`` holds caches derived from real (private) texts, e.g. their embeddings: it
    belongs with a run's private state and is never published.
    ``downstream`` is the one downstream-training configuration of this evaluation; it is
    recorded in the result because every downstream metric depends on it.
    """

    split: FederatedSplit
    profile: ModelProfile
    seed: int = 0
    work_dir: Path = field(default_factory=lambda: Path("runs") / "eval-cache")
    costs: dict[str, float] = field(default_factory=dict)
    downstream: DownstreamConfig = field(default_factory=DownstreamConfig)
    # The public starting point a released text set is fine-tuned from (the same model the
    # federated methods start from); None → the profile's untrained on-device LM.
    start_model: Callable[[], Any] | None = None
    # The run's canaries with their inclusion bits (trusted: the runner's plan), for the
    # ``canary`` audit; None when the run inserted none.
    canaries: CanaryPlan | None = None
    _embeddings: EmbeddingCache | None = field(default=None, init=False, repr=False)
    _trained: dict[str, DownstreamResult] = field(default_factory=dict, init=False, repr=False)
    _sampled: dict[str, list[str]] = field(default_factory=dict, init=False, repr=False)
    _policies: dict[str, Any] = field(default_factory=dict, init=False, repr=False)
    _derived: dict[tuple[Any, ...], Any] = field(default_factory=dict, init=False, repr=False)

    def embed(self, texts: list[str]) -> np.ndarray:
        """Embed with the profile's embedder; each text set is embedded once per context."""
        if self._embeddings is None:
            self._embeddings = EmbeddingCache(self.profile.embedder(), self.work_dir / "embeddings")
        return self._embeddings.embed(texts)

    def member_texts(self) -> list[str]:
        """The train texts the run trained on: the split's, minus those of the canaries the
        audit held out of the run (real train units, :mod:`benchmark.federation.canaries`)."""
        texts = self.split.texts("train")
        if self.canaries is None:
            return texts
        plan = self.canaries
        held_out = {
            r[TEXT]
            for unit, i in zip(plan.units, plan.included, strict=True)
            if not i
            for r in unit
        }
        return [t for t in texts if t not in held_out]

    def has_downstream(self, artifact: Artifact) -> bool:
        return artifact_key(artifact) in self._trained

    def downstream_result(self, artifact: Artifact) -> DownstreamResult:
        """The downstream LM for ``artifact`` (trained on its texts, or the released model)."""
        key = artifact_key(artifact)
        if key not in self._trained:
            self._trained[key] = run_downstream(
                artifact,
                self.split,
                self.profile.ondevice_lm(),
                self.downstream,
                self.seed,
                self.start_model,
                self.tokenizer_for(artifact),
            )
        return self._trained[key]

    def cached(self, artifact: Artifact, key: tuple[Any, ...], compute: Callable[[], Any]) -> Any:
        """``compute()`` once per (release, ``key``) in this context: what two metrics of one
        evaluation share (e.g. the policy's margins on the test tuples)."""
        full = (artifact_key(artifact), *key)
        if full not in self._derived:
            self._derived[full] = compute()
        return self._derived[full]

    def policy(self, artifact: Artifact) -> tuple[Any, Any]:
        """The downstream policy (model, tokenizer) the alignment metrics score (paper 003):
        for a preference release, the profile's ``preference_policy`` SFT-ed on the chosen
        responses and DPO-trained on the pairs (untouched for no pairs: the ε = 0 base
        model); for a released model, that model. Built once per context."""
        key = artifact_key(artifact)
        if key not in self._policies:
            if artifact.kind == "preferences":
                from benchmark.preference_training import AlignmentConfig, align

                generator = self.profile.preference_policy()
                memory = asdict(self.profile.training_memory())  # how, not what: spec wins
                config = AlignmentConfig(**{**memory, **self.downstream.alignment})
                model = align(
                    generator.model, generator.tokenizer, artifact.pairs, config, self.seed
                )
                self._policies[key] = (model, generator.tokenizer)
            else:
                self._policies[key] = self._released_model(str(artifact.model_dir))
        return self._policies[key]

    def _released_model(self, model_dir: str) -> tuple[Any, Any]:
        """A released model and its tokenizer (the generator's when it ships none), on the
        device of the profile's LMs."""
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        model = model.to(self.profile.lm_device()).eval()
        has_tokenizer = any(
            (Path(model_dir) / f).exists() for f in ("tokenizer.json", "tokenizer_config.json")
        )
        if has_tokenizer:
            return model, AutoTokenizer.from_pretrained(model_dir)
        return model, self.profile.scoring_generator().tokenizer

    def tokenizer_for(self, artifact: Artifact) -> Any | None:
        """The harness-built tokenizer a released model names (None: the on-device one)."""
        if artifact.tokenizer is None:
            return None
        from benchmark.profiles.ondevice_kinds import ondevice_tokenizer

        return ondevice_tokenizer(self.profile, artifact.tokenizer, self.split.texts("public"))

    def release_texts(self, artifact: Artifact, metric: str, minimum: int = 1) -> list[str]:
        """The texts a text metric scores: a text release's own texts, or for a released
        model ``downstream.model_samples`` texts sampled from it (once per context)."""
        if artifact.kind != "model":
            return require_texts(artifact, metric, minimum)
        key = artifact_key(artifact)
        if key not in self._sampled:
            from benchmark.evaluation.model_samples import sample_texts

            result = self.downstream_result(artifact)
            cfg = self.downstream
            self._sampled[key] = sample_texts(
                result.model,
                result.tokenizer,
                self.split.texts("public"),
                cfg.model_samples,
                self.seed,
                cfg.max_length,
                cfg.sample_temperature,
            )
        texts = self._sampled[key]
        if len(texts) < minimum:
            raise MetricNotApplicable(f"{metric} needs at least {minimum} texts from the model")
        return texts

    def compared_sets(
        self, artifact: Artifact, metric: str, reference_part: str, max_samples: int | None
    ) -> tuple[list[str], list[str]]:
        """Released (or sampled) texts and the real ``reference_part`` texts a distribution
        metric compares: each seeded-shuffled and capped at ``max_samples``."""
        synthetic = self.release_texts(artifact, metric, minimum=2)
        real = self.split.texts(reference_part)
        return (
            shuffled_subset(synthetic, max_samples, self.seed),
            shuffled_subset(real, max_samples, self.seed),
        )

    def sampled_count(self, artifact: Artifact) -> int | None:
        texts = self._sampled.get(artifact_key(artifact))
        return None if texts is None else len(texts)


def evaluation_models(metrics: list[dict[str, Any]], kind: str) -> tuple[str, ...]:
    """The profile roles evaluating a ``kind`` release with ``metrics`` (a spec's
    ``evaluation.metrics``: name and settings) loads."""
    from benchmark.profiles.roles import check_roles

    roles = [
        role
        for m in metrics
        for role in METRICS.get(m["name"]).models_for(kind, m.get("settings", {}))
    ]
    return check_roles(roles, "evaluation.metrics")


def evaluate(artifact: Artifact, ctx: EvalContext, metric_specs: list[dict[str, Any]]) -> dict:
    """Compute each ``{"name": ..., **settings}`` in ``metric_specs`` on ``artifact``.

    A spec may carry ``"label"`` to record two configurations of one metric side by side.
    Metrics that do not apply to the release kind are listed under ``skipped`` with the reason
    instead of failing the run (e.g. DCR for a released model without texts).
    """
    out: dict[str, Any] = {"metrics": {}, "settings": {}, "skipped": {}}
    for spec in progress(metric_specs, "evaluate", unit="metric"):
        settings = dict(spec)
        name = settings.pop("name")
        label = settings.pop("label", name)
        if label in out["metrics"] or label in out["skipped"]:
            raise ValueError(f"metric {label!r} requested twice; give one of them a 'label'")
        metric: Metric = METRICS.get(name)(**settings)
        try:
            metric.check_applicable(artifact)
            out["metrics"][label] = metric.compute(artifact, ctx)
        except MetricNotApplicable as exc:
            out["skipped"][label] = str(exc)
        out["settings"][label] = {"name": name, **metric.settings()}
    sampled = ctx.sampled_count(artifact)
    if sampled is not None:
        out["model_samples"] = {"texts": sampled, "source": "the released model"}
    if ctx.has_downstream(artifact):
        out["downstream"] = {
            "config": asdict(ctx.downstream),
            **ctx.downstream_result(artifact).summary(),
        }
    return out
