"""The one error a profile raises when a model it names cannot be loaded."""

from __future__ import annotations


class ModelUnavailableError(RuntimeError):
    """A profile's model is not installed or not in the local cache (and may not be fetched)."""
