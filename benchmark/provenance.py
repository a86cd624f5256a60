"""Code version, package versions and hardware, recorded in every result record."""

from __future__ import annotations

import os
import platform
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

RECORDED_PACKAGES = (
    "fedsynth",
    "torch",
    "transformers",
    "tokenizers",
    "datasets",
    "numpy",
    "scipy",
    "scikit-learn",
    "opacus",
    "dp-accounting",
    "sentence-transformers",
    "mauve-text",
    "faiss-cpu",
    "trl",
    "peft",
)


def package_versions() -> dict[str, str]:
    versions = {}
    for name in RECORDED_PACKAGES:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            versions[name] = "not installed"
    return versions


# The signed results store lives in the checkout, and runs add to it as they finish: what
# it holds is the harness's output, not its code, so it does not make a checkout dirty.
STORE_PATHSPEC = ":(exclude)results"


def code_version(root: Path = Path(__file__).resolve().parent.parent) -> str:
    """Git commit of the harness at ``root`` (``+dirty`` if its tracked code is modified;
    the results store does not count), else the package version."""
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", ".", STORE_PATHSPEC],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return rev + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return f"fedsynth-{package_versions()['fedsynth']}"


def cpu_model() -> str:
    """The processor's name (``/proc/cpuinfo``'s model name on Linux): a reproduction on
    another machine says which two it compared."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor()


def hardware() -> dict[str, str | int]:
    info: dict[str, str | int] = {
        "machine": platform.machine(),
        "cpu_model": cpu_model(),
        "cpus": os.cpu_count() or 0,
        "python": platform.python_version(),
    }
    try:
        import torch

        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
    except ImportError:
        pass
    return info
