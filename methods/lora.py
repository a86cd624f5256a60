"""The LoRA adapters POPri and PE+SFT put on the generator (paper 000 App. B: every linear
layer, no dropout; rank and alpha come from each adapter's config)."""

from __future__ import annotations

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
