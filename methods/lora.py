"""The LoRA adapters POPri and PE+SFT put on the generator (paper 000 App. B: every linear
layer, no dropout; rank and alpha come from each adapter's config)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def lora_config(rank: int, alpha: int) -> Any:
    from peft import LoraConfig

    return LoraConfig(
        r=rank,
        lora_alpha=alpha,
        lora_dropout=0.0,
        target_modules="all-linear",
        task_type="CAUSAL_LM",
    )


@contextmanager
def trainable_flags_kept(model: Any) -> Iterator[None]:
    """Restore every parameter's ``requires_grad`` and the instance's own ``forward`` on exit:
    peft freezes the base model when it adds an adapter and ``unload()`` does not unfreeze it,
    and trl's trainer replaces ``model.forward`` with a closure over the original; either
    would leave the profile's shared generator changed for the next method."""
    flags = {name: p.requires_grad for name, p in model.named_parameters()}
    patched = {k: vars(model)[k] for k in ("forward", "_original_forward") if k in vars(model)}
    try:
        yield
    finally:
        for name, param in model.named_parameters():
            param.requires_grad_(flags[name])
        for name in ("forward", "_original_forward"):
            vars(model).pop(name, None)
        vars(model).update(patched)
