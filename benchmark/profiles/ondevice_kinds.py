"""Paper 002's on-device LMs: a 1-layer LSTM or transformer on a named, harness-built vocabulary.

A method that trains one of these names its tokenizer, never supplies it: the evaluator
scores a released model in the units of that tokenizer, so a tokenizer written by the
method (say, one that maps every word to one token) would buy accuracy for free. The names:

- ``ondevice``: the profile's on-device LM tokenizer (the GPT-2-shaped models' vocabulary);
- ``public_llm``: the public LLM's tokenizer (paper 002 §3.1: LaMDA's 32K SentencePiece;
  SmolLM2's 49K BPE in ``cpu``); the only choice under which the LLM can be a distillation
  teacher, since teacher and student must share a vocabulary;
- ``word_unigram:K``: the top-K words of the split's *public* texts with an OOV token (the
  TFF baseline's word vocabulary; paper 002 builds it from client data and notes that costs
  budget; fedsynth builds it from public data, so it costs none).

Both the method and the evaluator resolve a name from (profile, the split's public texts)
with :func:`ondevice_tokenizer`, so they get the same vocabulary.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from benchmark.artifact import TOKENIZER_PATTERN, check_tokenizer_name
from benchmark.profiles.base import ModelProfile, OnDeviceLM
from benchmark.profiles.seeding import seeded


def ondevice_tokenizer(profile: ModelProfile, name: str, public_texts: list[str]) -> Any:
    """The tokenizer ``name`` for this profile and split (see the module docstring)."""
    match = TOKENIZER_PATTERN.fullmatch(check_tokenizer_name(name, "tokenizer"))
    if name == "ondevice":
        return profile.ondevice_lm().tokenizer
    if name == "public_llm":
        return profile.public_llm().tokenizer
    from benchmark.profiles.word_tokenizer import word_tokenizer

    return word_tokenizer(list(public_texts), int(match.group(1)), "split-public")


@dataclass(frozen=True)
class SmallShape:
    """Paper 002 §B.2: one layer, hidden 670, embedding 96 (heads: our choice); ``kind``
    is checked by :class:`~benchmark.profiles.small_lms.SmallLMConfig`."""

    kind: str = "lstm"
    embedding_size: int = 96
    hidden_size: int = 670
    num_heads: int = 4
    n_positions: int = 128


class SmallOnDeviceLM(OnDeviceLM):
    """A randomly initialised LSTM / transformer on ``tokenizer``'s vocabulary."""

    def __init__(
        self, tokenizer: Any, shape: SmallShape, tokenizer_name: str, device: str = "cpu"
    ) -> None:
        from benchmark.profiles.small_lms import small_lm_config

        self.tokenizer = tokenizer
        self.shape = shape
        self.device = device
        eos = tokenizer.eos_token_id
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
        fields = {k: v for k, v in asdict(shape).items() if k != "kind"}
        self.config = small_lm_config(shape.kind, len(tokenizer), eos, pad, **fields)
        self.name = f"{shape.kind}(" + ",".join(f"{k}={v}" for k, v in fields.items())
        self.name += f") on {tokenizer_name}"

    def build(self, seed: int) -> Any:
        from benchmark.profiles.small_lms import SmallLM

        with seeded(seed):
            return SmallLM(self.config)
