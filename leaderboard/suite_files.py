"""Suites as data: each named suite is one YAML file in ``leaderboard/suite_defs/``, versioned
like an lm-evaluation-harness task, and loaded here into a :class:`~leaderboard.suites.Suite`.

A file's ``version`` is bumped whenever an edit changes what a run of the suite measures;
its ``sha256`` (of the loaded definition, so comments and layout do not count) goes with
its name into every tuning report made under it, so a selection can be traced to the
definition it was made under. A file may ``include`` another (a file whose name starts with
``_`` is a base, not a suite): the including file's keys are merged over the base's, maps
key by key. ``shared`` holds values that other keys name by YAML anchor; it is not read.
The reasons and measurements behind each suite's numbers are in ``docs/suites.md``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from leaderboard.suites import Suite, SuiteDefinition, Variant

SUITE_DIR = Path(__file__).with_name("suite_defs")

# Suite fields a file may set, beside the file's own keys (name, version, ...).
_FIELDS = (
    "source",
    "split_options",
    "profile",
    "epsilons",
    "delta",
    "seeds",
    "metrics",
    "methods",
    "method_params",
    "selected_params",
    "downstream",
    "seeds_by_epsilon",
    "method_privacy",
    "tuning",
    "variants",
    "prepare",
    "contrasts",
)
_OWN = ("name", "version", "description", "expected_duration", "include", "shared")
_REQUIRED = (
    "name", "version", "description", "source", "split_options", "profile", "epsilons",
    "delta", "seeds", "metrics", "methods",
)  # fmt: skip
_VARIANT_KEYS = ("method", "epsilon", "params", "description", "role")
VARIANT_ROLES = ("method", "control")  # a variant is never a bound: bounds anchor the gap


class SuiteFileError(ValueError):
    """A suite file that does not define a suite."""


class _Loader(yaml.SafeLoader):
    """YAML 1.1 reads ``1e-5`` (no dot) as a string; suites write rates that way."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def _read(path: Path) -> dict[str, Any]:
    data = yaml.load(path.read_text(), Loader=_Loader)
    if not isinstance(data, dict):
        raise SuiteFileError(f"{path.name}: expected a mapping at the top")
    unknown = sorted(set(data) - set(_FIELDS) - set(_OWN))
    if unknown:
        raise SuiteFileError(f"{path.name}: unknown key {unknown[0]!r}")
    data.pop("shared", None)
    base = data.pop("include", None)
    if base is None:
        return data
    included = _read(path.with_name(base))
    for key in ("name", "version", "description", "expected_duration"):
        included.pop(key, None)
    return _merged(included, data)


def _merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merged(out[key], value)
        else:
            out[key] = value
    return out


def _digest(data: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def _variant(name: str, data: dict[str, Any]) -> Variant:
    unknown = sorted(set(data) - set(_VARIANT_KEYS))
    if unknown:
        raise SuiteFileError(f"variants.{name}: unknown key {unknown[0]!r}")
    role = data.get("role", "method")
    if role not in VARIANT_ROLES:
        raise SuiteFileError(f"variants.{name}.role: {role!r} is not one of {VARIANT_ROLES}")
    return Variant(
        data["method"],
        float(data["epsilon"]),
        data.get("params", {}),
        data.get("description", ""),
        role,
    )


def _by_epsilon(table: dict[str, Any], convert: Callable[[Any], Any]) -> dict[float, Any]:
    return {float(eps): convert(value) for eps, value in table.items()}


def load_suite(path: Path, preparations: dict[str, Callable[[Path], None]]) -> Suite:
    """The suite ``path`` defines; ``prepare`` names one of ``preparations``."""
    data = _read(path)
    missing = [key for key in _REQUIRED if key not in data]
    if missing:
        raise SuiteFileError(f"{path.name}: missing {missing[0]!r}")
    if data["name"] != path.stem:
        raise SuiteFileError(f"{path.name}: name {data['name']!r} is not the file's")
    if not isinstance(data["version"], int) or data["version"] < 1:
        raise SuiteFileError(f"{path.name}: version must be an integer >= 1")
    prepare = data.get("prepare")
    if prepare is not None and prepare not in preparations:
        raise SuiteFileError(
            f"{path.name}: prepare {prepare!r} is not one of {sorted(preparations)}"
        )
    fields: dict[str, Any] = {k: data[k] for k in _FIELDS if k in data}
    for key in ("epsilons", "seeds", "metrics", "methods"):
        if key in fields:
            fields[key] = tuple(float(v) if key == "epsilons" else v for v in fields[key])
    fields["delta"] = float(fields["delta"])
    if "selected_params" in fields:
        fields["selected_params"] = {
            method: _by_epsilon(table, dict) for method, table in fields["selected_params"].items()
        }
    if "seeds_by_epsilon" in fields:
        fields["seeds_by_epsilon"] = _by_epsilon(fields["seeds_by_epsilon"], tuple)
    if "variants" in fields:
        fields["variants"] = {n: _variant(n, v) for n, v in fields["variants"].items()}
    if "contrasts" in fields:
        fields["contrasts"] = {n: tuple(pair) for n, pair in fields["contrasts"].items()}
    if prepare is not None:
        fields["prepare"] = preparations[prepare]
    definition = SuiteDefinition(
        f"leaderboard/suite_defs/{path.name}", data["version"], _digest(data)
    )
    return Suite(
        name=data["name"],
        definition=definition,
        expected_duration=data.get("expected_duration", ""),
        **fields,
    )


def load_suites(
    preparations: dict[str, Callable[[Path], None]], directory: Path = SUITE_DIR
) -> dict[str, Suite]:
    """Every suite file of ``directory`` by suite name (bases, ``_*.yaml``, left out)."""
    suites = {}
    for path in sorted(directory.glob("*.yaml")):
        if not path.name.startswith("_"):
            suite = load_suite(path, preparations)
            suites[suite.name] = suite
    return suites
