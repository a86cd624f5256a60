"""Bounds on what a method may ask of the trusted side (issue 33, item 12).

The method process is untrusted, and everything it asks the coordinator for costs the
coordinator memory or time: a message it sends is read into memory, a release's
dimension sizes the vectors the pool sums and noises, a row mechanism holds every unit's
row, DP-PCA a dim × dim covariance, a cache request sets how much public text the
coordinator's generator writes, a pool call waits on the client side, and the hub models it
declares by id are downloaded by the coordinator. Each has a bound
here; a request past one is refused before the work starts, with a :class:`RequestBoundError`
naming the bound, its value and the variable that raises it. The defaults hold every
built-in method at the ``paper`` profile with room to spare (paper 003's candidate cache:
52,000 prompts x 5 responses x 300 tokens = 78 M tokens; a GPT-2 delta: 124 M floats);
an operator who needs more sets ``FEDSYNTH_BOUND_<NAME>`` (e.g.
``FEDSYNTH_BOUND_CACHE_TOKENS=1000000000``) in the coordinator's environment, which no
untrusted process inherits.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

from benchmark.privacy.errors import PrivacyError


class RequestBoundError(PrivacyError):
    """A method asked the trusted side for more than a bound allows."""


@dataclass(frozen=True)
class RequestBounds:
    message_bytes: int = 2 << 30  # one message from the method process or a client worker
    release_dim: int = 1 << 28  # a release's dimension (the pool holds a few such vectors)
    held_floats: int = 1 << 28  # rows held at once: units x dim, or DP-PCA's dim x dim
    cache_requests: int = 64  # cache requests of one run
    cache_texts: int = 1_000_000  # texts they ask the generator for (prompts x count)
    cache_tokens: int = 400_000_000  # new tokens they allow it (texts x max_new_tokens)
    call_seconds: int = 24 * 3600  # one pool call's wait on the client side
    hub_models: int = 8  # models a method declares by hub id (its own, beyond the roles)
    hub_bytes: int = 256 << 30  # what the coordinator downloads for them, in all (a 70B model)

    @classmethod
    def from_environment(cls) -> RequestBounds:
        """The defaults, each replaced by ``FEDSYNTH_BOUND_<NAME>`` where that is set."""
        values = {}
        for field in dataclasses.fields(cls):
            variable = f"FEDSYNTH_BOUND_{field.name.upper()}"
            if variable in os.environ:
                try:
                    values[field.name] = int(os.environ[variable])
                except ValueError:
                    raise ValueError(f"{variable} must be a whole number") from None
        return cls(**values)

    def check(self, name: str, value: int, what: str) -> None:
        """Refuse ``value`` (a request's ``what``) above the bound ``name``."""
        bound = getattr(self, name)
        if value > bound:
            raise RequestBoundError(
                f"{what}: {value:,} exceeds the harness's bound of {bound:,} ({name}); the "
                f"request was refused before any work. An operator can raise it with "
                f"FEDSYNTH_BOUND_{name.upper()}"
            )
