"""Runs that differ only in how the release is post-processed share one run's private rounds.

An LLM method's release sampling (temperature, top-p: :mod:`methods.release_sampling`) is
read only in ``finish``, after the last private round. Tuning it on validation is free of
privacy cost only if every candidate post-processes the *same* private rounds: candidates
that each ran their own rounds with fresh noise are several DP releases of the same people,
and picking the best of them costs more than one run's ε (Papernot & Steinke 2022). So a
run whose spec differs from a finished run's only in the method's declared
:attr:`~benchmark.method.Method.post_processing` keys takes that run's state after its last
round (checkpoint, ledger, secret noise seed) and runs only ``finish`` and the evaluation.
It is cheaper too: the rounds are over half of an LLM method's run.

What keeps it sound with a hostile adapter, whose declaration is only a claim:
- a fork's pool is sealed from the moment it is built, before the method resumes, and no
  client code runs for it (``ClientPool.seal``, ``NoClients``). The fork holds the
  donor's seed and release counter, so a call would draw the noise of the donor's next
  call, which other forks or the donor's own ``finish`` may have drawn already, and the
  difference of two such releases is an exact sum. So a fork's release is a function of
  the donor's state after its rounds and of public data only, whatever its ``finish`` does,
  and its ledger (the donor's rounds') is all it depends on; it runs no rounds either;
- the rounds' key holds everything else the rounds could depend on (split, the method's
  other config, privacy spec, seed, profile and its models, whether the canary audit holds
  units out), so a run shares rounds only with runs that differ in the declared keys. A key
  declared falsely can only make a record's config misdescribe its rounds, never its ε;
- the fork copies the donor's secret noise seed, so the canary audit holds out the units
  the rounds trained without;
- only a run's own rounds are shared (a fork is never a donor), and every record of a
  method that declares keys names the rounds it was made from (``rounds``: the run and the
  sha256 of its checkpoint after the last round), which, with the ledgers, is what a tuning
  report's claim that its selection was free is checked against
  (:func:`leaderboard.selection.accounting_of`).
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmark.files import atomic_write
from benchmark.registry import path_under
from benchmark.spec import ResolvedSpec, SpecError

DONORS = ".rounds"  # under the runs root: rounds key -> the finished run that holds them
# evaluation metrics that change what the rounds train on: the canary audit holds real
# units out of training (benchmark.federation.canaries)
TRAINING_METRICS = ("canary",)


def check_post_processing(keys: Any, config: dict[str, Any], where: str) -> tuple[str, ...]:
    """A method's declared post-processing keys, each a key of its resolved config."""
    if not isinstance(keys, list | tuple) or not all(isinstance(k, str) for k in keys):
        raise SpecError(f"{where}: expected a list of config keys, got {keys!r}")
    unknown = sorted(set(keys) - set(config))
    if unknown:
        raise SpecError(f"{where}: {unknown[0]!r} is not a key of the method's config")
    return tuple(sorted(set(keys)))


def rounds_key(
    resolved: ResolvedSpec, post_processing: Sequence[str], models: dict[str, Any]
) -> str:
    """A digest of everything a run's private rounds may depend on: its resolved spec (the
    method's resolved config less the post-processing keys; of the evaluation, the names
    of its metrics) and the profile's ``models``.

    The metrics are in it although only a :data:`TRAINING_METRICS` audit changes what the
    rounds train on: a tuning measures fewer metrics than the suite's published runs, so
    they never share rounds. Otherwise the published run at the tuning's seed would fork
    the candidates' rounds and, with the selected sampling, reproduce the very release that
    won on validation: its test score would carry the selection's luck, and the other
    seeds' would not."""
    data = resolved.to_dict()
    method = data["method"]
    method.pop("params")  # the resolved config holds them
    method["config"] = {k: v for k, v in method["config"].items() if k not in post_processing}
    metrics = data.pop("evaluation")["metrics"]
    data["metrics"] = sorted({m["name"] for m in metrics})
    data["models"] = models
    blob = json.dumps(data, sort_keys=True, default=str).encode()
    return f"{resolved.spec.method.name}__{hashlib.sha256(blob).hexdigest()[:24]}"


def rounds_identity(run_key: str, checkpoint_sha256: str) -> dict[str, str]:
    """Which rounds a release was made from: the run that ran them and the sha256 of its
    checkpoint after the last one (a run deleted and run again under the same key has
    other rounds)."""
    return {"run_key": run_key, "checkpoint_sha256": checkpoint_sha256}


def _donor_file(runs_root: Path, key: str) -> Path:
    return path_under(runs_root / DONORS, f"{key}.json", where="rounds key")


def register_donor(runs_root: Path, key: str, run_key: str) -> None:
    """Name the finished run ``run_key`` as the holder of the rounds ``key``, unless a run
    whose directory still exists holds them: the first to register keeps them, and an
    entry is rewritten only when its holder's directory is gone or it cannot be read."""
    path = _donor_file(runs_root, key)
    holder = donor_of(runs_root, key)
    if holder is not None and (runs_root / holder).is_dir():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    body = json.dumps({"run_key": run_key})
    if holder is not None or path.exists():  # its holder is gone, or it was never written
        atomic_write(path, body)
        return
    staged = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    staged.write_text(body)
    try:  # whole or not at all, and only if no other finishing run took it first
        os.link(staged, path)
    except FileExistsError:
        pass
    finally:
        staged.unlink()


def donor_of(runs_root: Path, key: str) -> str | None:
    """The run key of the run registered as holding the rounds ``key``, if any."""
    path = _donor_file(runs_root, key)
    try:
        run_key = json.loads(path.read_text()).get("run_key")
    except (OSError, ValueError, AttributeError):
        return None
    return run_key if isinstance(run_key, str) else None
