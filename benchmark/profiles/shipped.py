"""Instrument weights that ship with the project: one instrument for everyone.

The cpu profile's on-device LM and a split's public start are built by the project's own
recipe (:mod:`benchmark.profiles.pretraining`, :func:`benchmark.training.public_start`).
Built on each machine they differed from build to build, and the pretraining alone was a
long part of a first ``make run`` (``docs/measurements/working-scale.md#instrument``).
So the builds made here are committed under ``shipped/`` and used wherever their key
matches (the same inputs, recipe and pinned library versions), before the local cache and
instead of a rebuild. ``shipped/index.json`` lists each file's sha256; a file that is not
listed or does not match is ignored, never loaded.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from benchmark.profiles.cache import cache_dir, sha256_file

SHIPPED_DIR = Path(__file__).with_name("shipped")
INDEX = SHIPPED_DIR / "index.json"


def _index() -> dict[str, str]:
    try:
        return json.loads(INDEX.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def shipped_file(relative: str) -> Path | None:
    """The shipped file at ``relative`` (a path under ``shipped/``) if the index lists it and
    its bytes have the listed sha256; else None."""
    expected = _index().get(relative)
    path = SHIPPED_DIR / relative
    if expected is None or not path.is_file():
        return None
    if sha256_file(path) != expected:
        return None
    return path


def ship(source: Path, relative: str) -> None:
    """Copy a build made here into ``shipped/`` and list its sha256 (a maintainer's step,
    ``python -m benchmark.profiles.shipped``)."""
    target = SHIPPED_DIR / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
    index = _index()
    index[relative] = sha256_file(target)
    INDEX.write_text(json.dumps(dict(sorted(index.items())), indent=1) + "\n", encoding="utf-8")


def main() -> None:
    """Ship every on-device LM and public start in this machine's cache."""
    root = cache_dir()
    for path in sorted((root / "ondevice").glob("*/*")):
        if path.name in ("params.pt", "tokenizer.json"):
            ship(path, f"ondevice/{path.parent.name}/{path.name}")
    for path in sorted((root / "public_start").glob("*.pt")):
        ship(path, f"public_start/{path.name}")
    print(json.dumps(_index(), indent=1))


if __name__ == "__main__":
    main()
