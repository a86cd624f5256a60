"""The core as a method adapter sees it: everything an adapter (``methods/*.py``, a submitted
plugin file) may import from ``benchmark``, declared in one place. The rest of the core is
internal: ``tests/test_layers.py`` fails an adapter that imports past this module, and a
name here that no adapter uses.

Each name loads its home module on first use, so an adapter that needs only ``Method`` and
``Artifact`` (``docs/tutorials/example_adapter.py``) does not import torch, and neither does
``import methods`` (the registry's table of built-ins).
"""

from __future__ import annotations

import importlib
from typing import Any

# home module -> the names adapters import from it
EXPORTS: dict[str, tuple[str, ...]] = {
    # the contract: what a method is, what it gets, what it returns, how it is registered
    "benchmark.method": ("Method", "MethodContext"),
    "benchmark.artifact": ("Artifact", "ArtifactError", "check_tokenizer_name"),
    "benchmark.registry": ("METHODS",),
    "benchmark.spec": ("SpecError",),
    # what a client function runs on: its client's own data, one client or a batch
    "benchmark.federation.clients": ("ClientBatch", "ClientData"),
    "benchmark.data": ("LABEL", "TEXT"),
    # the profile's models, and the seeded sampling that keeps a run reproducible
    "benchmark.profiles.base": (
        "context_length",
        "Embedder",
        "Generator",
        "ModelProfile",
        "OnDeviceLM",
        "SamplingParams",
    ),
    "benchmark.profiles.seeding": ("seeded",),
    "benchmark.profiles.hub": ("from_hub",),
    "benchmark.profiles.embedders": ("SentenceTransformerEmbedder",),
    "benchmark.profiles.ondevice_kinds": ("SmallOnDeviceLM", "SmallShape", "ondevice_tokenizer"),
    # public corpora the profiles write (teacher texts, preference candidates)
    "benchmark.profiles.teacher_corpus": ("TeacherCorpus", "teacher_corpus"),
    "benchmark.profiles.candidate_corpus": ("candidate_request", "candidates"),
    # the shared public start and centralised fine-tuning (as the evaluator does it)
    "benchmark.training": (
        "FineTune",
        "PUBLIC_START_CONFIGS",
        "SELECT_ON",
        "fine_tune",
        "flat_params",
        "load_flat",
        "public_start",
        "validation_texts",
    ),
    "benchmark.preference_training": ("SFTConfig", "train_completions"),
    "benchmark.training_precision": ("float32_in_place",),
    "benchmark.federation.local_dp_sgd": ("control_prompt",),
    # language-model scoring and sampling helpers the metrics use too
    "benchmark.evaluation.downstream": (
        "encode",
        "evaluate_lm",
        "is_better",
        "model_device",
        "pad_right",
        "sequence_losses",
    ),
    "benchmark.evaluation.model_samples": ("ancestral_sample",),
    "benchmark.evaluation.sampling": ("shuffled_subset",),
    "benchmark.evaluation.fid": ("fid_from_features",),
    # noise calibration for a release a method accounts for itself
    "benchmark.privacy.accountants": ("analytic_gaussian_sigma",),
}

HOME = {name: module for module, names in EXPORTS.items() for name in names}
__all__ = sorted(HOME)


def __getattr__(name: str) -> Any:
    """Load ``name`` from its home module on first use (PEP 562)."""
    if name not in HOME:
        raise AttributeError(f"benchmark.api has no {name!r}: adapters may import {__all__}")
    value = getattr(importlib.import_module(HOME[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
