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


def code_version() -> str:
    """Git commit of the harness (``+dirty`` if modified), else the package version."""
    root = Path(__file__).resolve().parent.parent
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return rev + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return f"fedsynth-{package_versions()['fedsynth']}"


def hardware() -> dict[str, str | int]:
    info: dict[str, str | int] = {
        "machine": platform.machine(),
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
