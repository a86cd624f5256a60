"""Trusted set-up a suite file names (``prepare``), run on the built split before any
sandboxed run: caches the method processes may read but not write."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path


def warm_teacher(split_path: Path) -> None:
    """The public LLM's pass over the split's public spans (dp_ftrl_dm's distillation
    teacher), cached here, in the trusted process, before the sandboxed runs read it."""
    from benchmark.data import TEXT
    from benchmark.profiles import get_profile
    from benchmark.profiles.teacher_corpus import teacher_corpus
    from benchmark.split_storage import load_split
    from methods.dp_ftrl_dm import DPFTRLDM

    config = DPFTRLDM.resolve_config("cpu", {})
    texts = [r[TEXT] for r in load_split(split_path).records("public")]
    teacher_corpus(
        get_profile("cpu").public_llm(), texts, config["max_length"], config["distill_top_k"]
    )


PREPARATIONS: dict[str, Callable[[Path], None]] = {"warm_teacher": warm_teacher}
