"""Name -> implementation registries for methods, dataset builders and metrics.

Built-ins are registered lazily as ``"module:attribute"`` strings so that importing the
registry (e.g. for ``fedsynth --help``) loads no heavy code, and a module that fails to
import breaks only the runs that ask for it. Third parties add entries through the entry
point groups ``fedsynth.methods`` / ``fedsynth.datasets`` / ``fedsynth.metrics`` or by
loading a plugin file with :func:`load_plugin_file`. Built-ins win on name clashes.

Registered names become run keys, directories and leaderboard markup, and submissions on
one host share those directories, so every name must match :data:`NAME_PATTERN`; and any
path built from a name is checked to stay under its root (:func:`path_under`).
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from collections.abc import Callable
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

NAME_PATTERN = re.compile(r"[a-z][a-z0-9_]{0,63}")
# One directory or file name made from names and keys (split names, run keys, entry keys):
# no separators, no leading dot (so never "." or ".."), nothing that is markup or a glob.
PATH_PART_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9@.+_-]{0,254}")


PLUGIN_PREFIX = "fedsynth_plugin_"  # the module name of a file loaded by load_plugin_file


class RegistryError(LookupError):
    """A name is unknown, or its implementation failed to load."""


class UnsafePathError(ValueError):
    """A name would become a path outside its root, or one that is not a plain file name."""


def valid_name(name: object) -> bool:
    """Whether ``name`` may be registered or asked for: it becomes part of run keys, paths
    and leaderboard markup, so only lowercase letters, digits and ``_`` (64 at most)."""
    return isinstance(name, str) and NAME_PATTERN.fullmatch(name) is not None


def path_under(root: Path, *parts: str, where: str) -> Path:
    """``root / parts...``, refused (naming ``where``) unless every part is one plain file
    name and the resolved path, symlinks followed, stays under ``root``: a name crafted by
    one submission must not make the harness write or pack files outside its root."""
    for part in parts:
        if not isinstance(part, str) or PATH_PART_PATTERN.fullmatch(part) is None:
            raise UnsafePathError(
                f"{where}: {part!r} is not a plain file name "
                f"(must match ^{PATH_PART_PATTERN.pattern}$)"
            )
    path = root.joinpath(*parts)
    check_under(root, path, where=where)
    return path


def check_under(root: Path, path: Path, *, where: str) -> None:
    """Refuse ``path`` (naming ``where``) if it resolves outside ``root``."""
    if not path.resolve().is_relative_to(root.resolve()):
        raise UnsafePathError(f"{where}: {path} resolves outside {root}")


class Registry:
    """One kind of pluggable thing (``kind``), discoverable through ``group`` entry points."""

    def __init__(self, kind: str, group: str, builtins_module: str) -> None:
        self.kind = kind
        self.group = group
        self.builtins_module = builtins_module
        self._targets: dict[str, str | Any] = {}
        self._builtin: set[str] = set()
        self._entry_points_loaded = False

    def register_lazy(self, name: str, target: str) -> None:
        """Register a built-in as ``"package.module:attribute"``, imported on first use."""
        self._check_name(name)
        self._targets[name] = target
        self._builtin.add(name)

    def register(self, name: str) -> Callable[[Any], Any]:
        """Decorator for plugins: ``@METHODS.register("my_method")``."""
        self._check_name(name)

        def decorate(obj: Any) -> Any:
            self._load_entry_points()
            if name in self._builtin:
                raise RegistryError(f"{self.kind} {name!r} is built in and cannot be replaced")
            self._targets[name] = obj
            return obj

        return decorate

    def _check_name(self, name: object) -> None:
        if not valid_name(name):
            raise RegistryError(
                f"{self.kind} name {name!r} is not allowed: it must match ^{NAME_PATTERN.pattern}$"
            )

    def registered_by(self, module_name: str) -> list[str]:
        """Names whose registered object was defined in ``module_name`` (e.g. a plugin file)."""
        return sorted(
            name
            for name, target in self._targets.items()
            if getattr(target, "__module__", None) == module_name
        )

    def _load_entry_points(self) -> None:
        if self._entry_points_loaded:
            return
        self._entry_points_loaded = True
        importlib.import_module(self.builtins_module)  # registers the built-ins lazily
        for ep in entry_points(group=self.group):  # a badly named one cannot be asked for
            if ep.name not in self._builtin and valid_name(ep.name):
                self._targets.setdefault(ep.name, ep)

    def registered_object(self, name: str) -> Any | None:
        """The object registered as ``name`` by code in this process (a test, a plugin file),
        or None for a built-in or an entry point, which another process finds by name."""
        self._load_entry_points()
        target = self._targets.get(name)
        if name in self._builtin or target is None or isinstance(target, str):
            return None
        if hasattr(target, "load") and hasattr(target, "group"):
            return None
        return target

    def is_reviewed(self, name: str) -> bool:
        """Whether ``name``'s code is the operator's own: built in, or registered by code
        this process imported itself (a test's). An entry point or a submitted file
        (:func:`load_plugin_file`) is third-party code."""
        target = self.registered_object(name)  # loads the entry points first
        if name in self._builtin:
            return True
        return target is not None and not target.__module__.startswith(PLUGIN_PREFIX)

    def names(self) -> list[str]:
        self._load_entry_points()
        return sorted(self._targets)

    def get(self, name: str) -> Any:
        """Return the implementation of ``name``, importing it if needed."""
        self._load_entry_points()
        if name not in self._targets:
            raise RegistryError(
                f"unknown {self.kind} {name!r}; available: {', '.join(self.names()) or 'none'}"
            )
        target = self._targets[name]
        try:
            if isinstance(target, str):
                module, _, attr = target.partition(":")
                target = getattr(importlib.import_module(module), attr)
            elif hasattr(target, "load") and hasattr(target, "group"):
                target = target.load()
        except Exception as exc:  # a broken plugin only breaks the runs that use it
            raise RegistryError(f"{self.kind} {name!r} failed to load: {exc!r}") from exc
        self._targets[name] = target
        return target


def load_plugin_file(path: str | Path) -> str:
    """Import a user's Python file so its ``@...register(...)`` decorators run; returns the
    module name it was imported as (see :meth:`Registry.registered_by`)."""
    path = Path(path).resolve()
    if not path.is_file():
        raise RegistryError(f"plugin file not found: {path}")
    module_name = f"{PLUGIN_PREFIX}{path.stem}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[module_name]
        raise RegistryError(f"plugin {path} failed to load: {exc!r}") from exc
    return module_name


METHODS = Registry("method", "fedsynth.methods", "methods")
DATASETS = Registry("dataset", "fedsynth.datasets", "datasets_builders")
METRICS = Registry("metric", "fedsynth.metrics", "benchmark.evaluation")
