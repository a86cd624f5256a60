"""Loading the ``paper`` profile's models by hub id, failing fast and clearly when offline."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

from benchmark.profiles.errors import ModelUnavailableError

T = TypeVar("T")

OFFLINE_VARS = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


def hub_offline() -> bool:
    """True when the environment forbids hub downloads."""
    return any(os.environ.get(v, "").lower() in {"1", "true", "yes", "on"} for v in OFFLINE_VARS)


def _unavailable(model_id: str, revision: str, why: str) -> ModelUnavailableError:
    return ModelUnavailableError(
        f"paper profile: hub model {model_id!r} (revision {revision!r}) {why}. The 'paper' "
        f"profile needs the papers' hub models: download them where the hub is reachable "
        f"(e.g. `hf download {model_id}`) into this machine's Hugging Face cache "
        f"(HF_HOME={os.environ.get('HF_HOME', '~/.cache/huggingface')}), or run with the 'cpu' "
        f"profile, which needs no hub."
    )


def is_cached(model_id: str, revision: str) -> bool:
    """Whether the model's ``config.json`` at ``revision`` is in the local HF cache (every
    model a profile loads has one: transformers' and sentence-transformers' alike)."""
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(model_id, "config.json", revision=revision), str)


def require_cached(model_id: str, revision: str) -> None:
    """Offline, raise at once unless the model's ``config.json`` is in the local HF cache."""
    if hub_offline() and not is_cached(model_id, revision):
        raise _unavailable(model_id, revision, "is not in the local cache and HF_HUB_OFFLINE=1")


def from_hub(load: Callable[..., T], model_id: str, revision: str, **kwargs: Any) -> T:
    """``load(model_id, revision=revision, **kwargs)`` with a clear error when unavailable."""
    require_cached(model_id, revision)
    try:
        return load(model_id, revision=revision, **kwargs)
    except OSError as err:
        raise _unavailable(model_id, revision, f"could not be loaded ({err})") from err
