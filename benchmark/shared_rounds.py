"""Runs that differ only in how the release is post-processed share one run's private rounds.

An LLM method's release sampling (temperature, top-p: :mod:`methods.release_sampling`) is
read only in ``finish``, after the last private round. Tuning it on validation is free of
privacy cost only if every candidate post-processes the *same* private rounds: candidates
that each ran their own rounds with fresh noise are several DP releases of the same people,
and picking the best of them costs more than one run's ε (Papernot & Steinke 2022). So a
run whose spec differs from a finished run's only in the method's declared
:attr:`~benchmark.method.Method.post_processing` keys takes that run's state after its last
round (checkpoint, ledger, secret noise seed) and runs only ``finish`` and the evaluation.
It is cheaper too: the rounds are most of an LLM method's run.

What keeps it sound with a hostile adapter, whose declaration is only a claim:
- the rounds' key holds everything the rounds could depend on (split, method and its other
  config, privacy spec, seed, profile, and whether the canary audit holds units out), so
  only the declared keys differ;
- a donor is a *finished* run whose ``finish`` released nothing private (its record's ledger
  equals its last checkpoint's): the fork resumes after the last round, and any private
  call its ``finish`` makes is new, charged to its own ledger and checked against its
  budget as every release is;
- the fork copies the donor's secret noise seed, so the canary audit holds out the same
  units the rounds trained without;
- the fork's record names the donor (``rounds_from``), and its ε is the one run's.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmark.files import atomic_write
from benchmark.registry import path_under
from benchmark.spec import ResolvedSpec, SpecError

DONORS = ".rounds"  # under the runs root: rounds key -> the finished run that holds them
ROUNDS_METRICS = ("canary",)  # evaluation settings that change what the rounds train on


def check_post_processing(keys: Any, config: dict[str, Any], where: str) -> tuple[str, ...]:
    """A method's declared post-processing keys, each a key of its resolved config."""
    if not isinstance(keys, list | tuple) or not all(isinstance(k, str) for k in keys):
        raise SpecError(f"{where}: expected a list of config keys, got {keys!r}")
    unknown = sorted(set(keys) - set(config))
    if unknown:
        raise SpecError(f"{where}: {unknown[0]!r} is not a key of the method's config")
    return tuple(sorted(set(keys)))


def rounds_key(resolved: ResolvedSpec, post_processing: Sequence[str]) -> str:
    """A digest of everything a run's private rounds may depend on: its resolved spec less
    the post-processing keys and the evaluation's metrics other than :data:`ROUNDS_METRICS`."""
    data = resolved.to_dict()
    for part in ("params", "config"):  # as the spec gave them, and resolved
        data["method"][part] = {
            k: v for k, v in data["method"][part].items() if k not in post_processing
        }
    metrics = data.pop("evaluation")["metrics"]
    data["rounds_metrics"] = [m for m in metrics if m["name"] in ROUNDS_METRICS]
    blob = json.dumps(data, sort_keys=True, default=str).encode()
    return f"{resolved.spec.method.name}__{hashlib.sha256(blob).hexdigest()[:24]}"


def _donor_file(runs_root: Path, key: str) -> Path:
    (runs_root / DONORS).mkdir(parents=True, exist_ok=True)
    return path_under(runs_root / DONORS, f"{key}.json", where="rounds key")


def register_donor(runs_root: Path, key: str, run_key: str) -> None:
    """Name the finished run ``run_key`` as the holder of the rounds ``key`` (the first one
    to finish keeps it)."""
    path = _donor_file(runs_root, key)
    if not path.exists():
        atomic_write(path, json.dumps({"run_key": run_key}))


def donor_of(runs_root: Path, key: str) -> str | None:
    """The run key of the finished run that holds the rounds ``key``, if any."""
    path = _donor_file(runs_root, key)
    if not path.exists():
        return None
    run_key = json.loads(path.read_text()).get("run_key")
    return run_key if isinstance(run_key, str) else None


def finish_released_nothing(record: dict[str, Any], checkpoint: dict[str, Any]) -> bool:
    """Whether the finished run's ``finish`` made no private release: its record's ledger
    is its last checkpoint's."""
    return json.dumps(record["privacy"]["ledger"], sort_keys=True) == json.dumps(
        checkpoint["ledger"], sort_keys=True
    )
