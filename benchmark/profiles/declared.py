"""The profile as a method process sees it: the roles its method declared, and no other.

The coordinator resolves only a run's declared roles before the sandbox starts
(:mod:`benchmark.profiles.roles`), so a role a method uses but did not declare would fail
deep inside a load (no network, a read-only cache) or, with the model already cached by
another run, pass unnoticed and make the declaration a lie that ``models fetch`` and the
suite plans repeat. Asking for it fails here instead, naming the role and the fix.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from benchmark.profiles.base import (
    Embedder,
    Generator,
    MaskedFiller,
    ModelProfile,
    OnDeviceLM,
    TrainingMemory,
)
from benchmark.profiles.roles import UndeclaredModelError, check_roles


class DeclaredProfile(ModelProfile):
    """``profile`` restricted to ``roles``, those ``method`` declares."""

    def __init__(self, profile: ModelProfile, roles: Iterable[str], method: str) -> None:
        self.name = profile.name
        self._profile = profile
        self._roles = check_roles(roles, f"{method}.models")
        self._method = method

    def _role(self, role: str) -> Any:
        if role not in self._roles:
            raise UndeclaredModelError(
                f"{self._method} loads the profile's {role!r}, which it does not declare: "
                f"add it to the method's `models` (declared: {list(self._roles)})"
            )
        return getattr(self._profile, role)()

    def generator(self) -> Generator:
        return self._role("generator")

    def embedder(self) -> Embedder:
        return self._role("embedder")

    def ondevice_lm(self) -> OnDeviceLM:
        return self._role("ondevice_lm")

    def conditional_lm(self) -> OnDeviceLM:
        return self._role("conditional_lm")

    def public_llm(self) -> OnDeviceLM:
        return self._role("public_llm")

    def masked_filler(self) -> MaskedFiller | None:
        return self._role("masked_filler")

    def preference_embedder(self) -> Embedder:
        return self._role("preference_embedder")

    def preference_generator(self) -> Generator:
        return self._role("preference_generator")

    def preference_policy(self) -> Generator:
        return self._role("preference_policy")

    def describe(self) -> dict[str, str]:
        return self._profile.describe()

    def accelerator(self) -> str | None:
        """The profile's own: a method's models live where the coordinator opened."""
        return self._profile.accelerator()

    def training_memory(self) -> TrainingMemory:
        """The profile's own: how PE+SFT fits its batches on the profile's hardware."""
        return self._profile.training_memory()
