"""Tokenizers built locally: the ``tiny`` byte-level BPE and the exact GPT-2 BPE.

Neither touches a model hub. The tiny tokenizer is trained on :data:`TINY_CORPUS` and cached
as ``tokenizer.json`` under the cache dir (keyed by a hash of the corpus and settings); the
GPT-2 tokenizer is converted from ``openai-whisper``'s ``assets/gpt2.tiktoken`` (the 50,257
GPT-2 ranks), located with ``find_spec`` so that ``whisper`` itself is never imported.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from benchmark.files import atomic_write
from benchmark.profiles.cache import cache_dir
from benchmark.profiles.packaged import packaged_file
from benchmark.profiles.tiny_corpus import TINY_CORPUS

TINY_VOCAB_SIZE = 512
EOS = "<|endoftext|>"
PAD = "<pad>"
MASK = "<mask>"
GPT2_REQUIREMENT = "openai-whisper==20250625"
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def _wrap(tokenizer_object: Any, **special: str) -> Any:
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_object=tokenizer_object, **special)


def train_bytelevel_bpe(corpus: Iterable[str], vocab_size: int) -> Any:
    """A byte-level BPE (GPT-2 style, any byte encodable) with eos, pad and mask tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=[EOS, PAD, MASK],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    return tok


def wrap_bytelevel_bpe(tok: Any) -> Any:
    """The transformers tokenizer of a :func:`train_bytelevel_bpe` tokenizer."""
    return _wrap(tok, bos_token=EOS, eos_token=EOS, pad_token=PAD, mask_token=MASK)


def tiny_tokenizer_key() -> str:
    """Content hash of everything the tiny tokenizer depends on."""
    from tokenizers import __version__ as tokenizers_version

    payload = json.dumps([TINY_CORPUS, TINY_VOCAB_SIZE, EOS, PAD, MASK, tokenizers_version])
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def tiny_tokenizer() -> Any:
    """The tiny byte-level BPE (vocab 512; eos=bos=``<|endoftext|>``, pad, mask), cached."""
    from tokenizers import Tokenizer

    path = cache_dir() / "tiny" / f"tokenizer-{tiny_tokenizer_key()}.json"
    if path.exists():
        tok = Tokenizer.from_file(str(path))
    else:
        tok = train_bytelevel_bpe(TINY_CORPUS, TINY_VOCAB_SIZE)
        atomic_write(path, tok.to_str())
    return wrap_bytelevel_bpe(tok)


def gpt2_bpe_file() -> Path:
    """``whisper/assets/gpt2.tiktoken`` of the installed ``openai-whisper``."""
    return packaged_file("whisper", "assets/gpt2.tiktoken", GPT2_REQUIREMENT)


def gpt2_tokenizer() -> Any:
    """The exact GPT-2 tokenizer ("Hello world" -> [15496, 995]); pad = eos = id 50256."""
    from transformers.convert_slow_tokenizer import TikTokenConverter

    converted = TikTokenConverter(
        vocab_file=str(gpt2_bpe_file()), pattern=GPT2_PATTERN, additional_special_tokens=[EOS]
    ).converted()
    return _wrap(converted, bos_token=EOS, eos_token=EOS, unk_token=EOS, pad_token=EOS)
