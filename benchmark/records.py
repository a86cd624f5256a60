"""Result records: the only thing a run publishes (never diagnostics, never client data)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from benchmark.data import FederatedSplit
from benchmark.files import atomic_write
from benchmark.privacy.ledger import PrivacyLedger
from benchmark.provenance import code_version, hardware, package_versions
from benchmark.spec import ResolvedSpec
from benchmark.split_manifest import unit_statement

SCHEMA_VERSION = 1


# In a run directory: why the leaderboard did not keep the finished run's record (its canary
# audit refuted its ε); such a run lends its rounds to no other (benchmark.shared_rounds).
PUBLICATION_REFUSED = "publication_refused.json"


def json_epsilon(value: float) -> float | str:
    return value if math.isfinite(value) else "inf"


def release_writer(models: dict[str, str], release_kind: str) -> str:
    """The model whose text a release is made of, the one a contamination check concerns:
    the candidate writer for preference pairs (paper 003's Llama-2-7b-chat on ``paper``; on
    profiles that name no separate writer, the generator), the generator otherwise. A
    released model (DP-FL's on-device LM, the preference policy) is still checked against
    the generator: its own pretraining data is not registered here."""
    if release_kind == "preferences":
        return models.get("preference_generator", models.get("generator", ""))
    return models.get("generator", "")


def contamination(manifest: dict[str, Any], generator: str) -> dict[str, str]:
    """Whether ``generator`` (a model id, optionally followed by its revision) may have
    seen the split's private data."""
    from benchmark.model_cutoffs import check

    model = generator.split()[0] if generator else "unknown"
    try:
        verdict = check(manifest, model)
    except KeyError:
        return {"model": model, "verdict": "unknown", "reason": "no registered cut-off date"}
    return {"model": verdict.model, "verdict": verdict.status, "reason": verdict.reason}


def _group_epsilons(ledger: PrivacyLedger, delta: float, accountant: str) -> dict[str, Any]:
    """Each client group's ε, for a grouped ledger (``epsilon`` is the worst of them)."""
    if not any(r.groups for r in ledger.releases):
        return {}
    from benchmark.privacy.accountants import group_epsilons

    by_group = group_epsilons(ledger.releases, delta, accountant)
    return {"group_epsilons": {g: json_epsilon(e) for g, e in by_group.items()}}


# The fields of ``models`` (a profile's ``describe()``) that name a model a run used: a
# profile variant may change one under the same spec, so the same run key.
MODEL_FIELDS = ("generator", "masked_filler", "embedder", "ondevice_lm", "public_llm")


class StaleRecordError(RuntimeError):
    """A kept record of this run key was made with other models than the profile has now."""


def check_same_models(record: dict[str, Any], models: dict[str, Any], where: str) -> None:
    """Refuse to reuse ``record`` (kept at ``where``) when a model it names differs from the
    current profile's ``models``: the run key names the profile, not its models (issue 32:
    ``cpu-gemma`` came to sample a restricted vocabulary under the same key)."""
    kept = record.get("models", {})
    for field in MODEL_FIELDS:
        if field in kept and field in models and kept[field] != models[field]:
            raise StaleRecordError(
                f"{where} keeps run {record.get('run_key')} made with another {field} "
                f"({kept[field]!r}; the profile now has {models[field]!r}): move it away, "
                "or use another runs root or results store"
            )


def build_record(
    *,
    resolved: ResolvedSpec,
    split: FederatedSplit,
    epsilon: float,
    ledger: PrivacyLedger,
    metrics: dict[str, float],
    evaluation: dict[str, Any],
    costs: dict[str, float],
    wall_seconds: float,
    profile: Any,
    role: str,
    release_kind: str,
    instrument: dict[str, str] | None = None,
    verbatim: dict[str, Any] | None = None,
    open_on_schedule: set[str] | None = None,
) -> dict[str, Any]:
    spec = resolved.spec
    models = profile.describe()
    record = {
        "schema_version": SCHEMA_VERSION,
        "run_key": resolved.run_key,
        "spec": resolved.to_dict(),
        "split": {
            "name": split.name,
            "version": split.version,
            "content_hash": split.content_hash,
        },
        "contamination": contamination(split.manifest, release_writer(models, release_kind)),
        "method": {"name": spec.method.name, "role": role, "config": resolved.method_config},
        "privacy": {
            "epsilon": json_epsilon(epsilon),
            "epsilon_budget": json_epsilon(spec.privacy.epsilon),
            "delta": spec.privacy.delta,
            "unit": spec.privacy.unit,
            "unit_statement": unit_statement(split.manifest, spec.privacy.unit),
            "accountant": spec.privacy.accountant,
            "guarantee": spec.privacy.guarantee,
            "noise_seed": spec.privacy.noise_seed,
            **_group_epsilons(ledger, spec.privacy.delta, spec.privacy.accountant),
            "ledger": ledger.to_json(),
        },
        "metrics": metrics,
        "evaluation": evaluation,
        "costs": costs,
        "models": models,
        # the digest of the start model the release was measured from (benchmark.instrument)
        "instrument": instrument or {},
        "wall_seconds": wall_seconds,
        "hardware": hardware(),
        "code_version": code_version(),
        "packages": package_versions(),
    }
    if verbatim is not None:  # a release with texts: its copies of private texts, counted
        record["verbatim"] = verbatim
    if open_on_schedule is not None:  # what the host could not close on the schedule
        record["privacy"]["open_on_schedule"] = sorted(open_on_schedule)
    return record


def write_record(record: dict[str, Any], path: Path) -> None:
    """Write atomically so a half-written record is never read."""
    atomic_write(path, json.dumps(record, indent=1, sort_keys=True))
