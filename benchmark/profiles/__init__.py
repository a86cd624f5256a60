"""Model profiles: tiny (tests), cpu (offline quickstart), paper (hub models on a GPU).

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
    "paper": "benchmark.profiles.paper:PaperProfile",
}

_instances: dict[str, ModelProfile] = {}


def get_profile(name: str) -> ModelProfile:
    """The process-wide instance of profile ``name`` (models are cached inside it)."""
    if name not in PROFILES:
        raise ValueError(f"unknown model profile {name!r}; allowed: {', '.join(PROFILES)}")
    if name not in _instances:
        module, attr = PROFILES[name].split(":")
        _instances[name] = getattr(importlib.import_module(module), attr)()
    return _instances[name]


__all__ = ["PROFILES", "ModelProfile", "ModelUnavailableError", "cache_dir", "get_profile"]
