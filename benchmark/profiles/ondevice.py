"""On-device LMs: a random-init GPT-2 shape (``tiny``) and a hub checkpoint (``paper``); the
``cpu`` profile's is pretrained on this machine (``pretraining.py``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from benchmark.profiles.base import OnDeviceLM
from benchmark.profiles.seeding import seeded


@dataclass(frozen=True)
class GPT2Shape:
    """Size of a GPT-2-architecture on-device model."""

    n_layer: int
    n_embd: int
    n_head: int
    n_positions: int

    def label(self) -> str:
        return "gpt2(" + ",".join(f"{k}={v}" for k, v in asdict(self).items()) + ")"


class RandomGPT2LM(OnDeviceLM):
    """A GPT-2-architecture model initialised from ``seed`` (no pretrained weights offline).

    Used where no small pretrained causal LM can be had without a hub: its public starting
    point is random, so methods that want a public-pretrained start must pretrain it on the
    split's public part themselves.
    """

    def __init__(self, tokenizer: Any, shape: GPT2Shape) -> None:
        from transformers import GPT2Config

        self.tokenizer = tokenizer
        self.shape = shape
        self.name = shape.label()
        eos = tokenizer.eos_token_id
        self.config = GPT2Config(
            vocab_size=len(tokenizer),
            bos_token_id=eos,
            eos_token_id=eos,
            pad_token_id=tokenizer.pad_token_id,
            **asdict(shape),
        )

    def build(self, seed: int) -> Any:
        from transformers import GPT2LMHeadModel

        with seeded(seed):
            return GPT2LMHeadModel(self.config)


class PretrainedLM(OnDeviceLM):
    """A pretrained checkpoint (distilgpt2 in ``paper``); every new model is a fresh load."""

    def __init__(
        self, name: str, tokenizer: Any, load: Callable[[], Any], device: str = "cpu"
    ) -> None:
        self.name = name
        self.tokenizer = tokenizer
        self.device = device
        self._load = load

    def build(self, seed: int) -> Any:
        """The checkpoint itself: it is the same for every seed."""
        return self._load()
