"""Model profiles: tiny (tests), cpu (offline quickstart; cpu-gemma: Gemma 3 270M as its
generator), paper (hub models on a GPU), gpu (the packaged models on a GPU at the papers'
sample counts).

Importing this package loads no torch/transformers: a profile's module is imported on the
first :func:`get_profile` call for it, and each profile builds its models on first use.
"""

from __future__ import annotations

import importlib

from benchmark.profiles.base import ModelProfile
from benchmark.profiles.cache import cache_dir
from benchmark.profiles.errors import ModelUnavailableError

PROFILES: dict[str, str] = {
    "tiny": "benchmark.profiles.tiny:TinyProfile",
    "cpu": "benchmark.profiles.cpu:CpuProfile",
    "cpu-gemma": "benchmark.profiles.cpu:CpuGemmaProfile",
    "paper": "benchmark.profiles.paper:PaperProfile",
    "gpu": "benchmark.profiles.gpu:GpuProfile",
}

# A variant runs other models in some roles but its family's method configs and recipes.
# ``gpu`` runs the papers' method configs (their sample counts) with the packaged models.
FAMILIES: dict[str, str] = {"cpu-gemma": "cpu", "gpu": "paper"}

_instances: dict[str, ModelProfile] = {}


def family(name: str) -> str:
    """The profile whose method configs and recipes profile ``name`` uses (itself, or the
    profile a variant varies)."""
    return FAMILIES.get(name, name)


def new_profile(name: str) -> ModelProfile:
    """A fresh instance of profile ``name``: its models are its own, so a method that
    fine-tunes the generator in place cannot leak into the next run."""
    if name not in PROFILES:
        raise ValueError(f"unknown model profile {name!r}; allowed: {', '.join(PROFILES)}")
    module, attr = PROFILES[name].split(":")
    return getattr(importlib.import_module(module), attr)()


def get_profile(name: str) -> ModelProfile:
    """The process-wide instance of profile ``name``, for read-only uses (models are
    cached inside it); runs use :func:`new_profile`."""
    if name not in _instances:
        _instances[name] = new_profile(name)
    return _instances[name]


__all__ = [
    "PROFILES",
    "ModelProfile",
    "ModelUnavailableError",
    "cache_dir",
    "family",
    "get_profile",
    "new_profile",
]
