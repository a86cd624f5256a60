"""Leaderboard entries: the per-seed run records of one configuration, aggregated.

An entry's key is its run key without the seed; its metrics carry mean, std and a
t-interval over seeds; ε is the largest ε recomputed over its seeds' ledgers. The
``integrity`` digest covers everything else, so an accidental edit is detected; anyone can
recompute it, so the harness also signs each entry (leaderboard/signing.py).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from benchmark.evaluation.stats import summarize
from benchmark.privacy.audit import refutation_p_value
from leaderboard.client_hits import entry_client_hits
from leaderboard.schema import ENTRY_SCHEMA_VERSION, EntryError, validate_entry

# Privacy audits, kept apart from the utility metrics: membership inference on text and
# model releases (mia), on preference policies (premia, paper 003 Table 5), DCR, and the
# one-run canary audit's ε lower bound (canary).
AUDIT_PREFIXES = ("mia.", "premia.", "dcr.", "canary.")


CANARY_BOUND = "canary.epsilon_lower_bound"
# The audit's recorded outcome: m canaries, r guesses, v of them right.
CANARY_COUNTS = ("canary.canaries", "canary.guesses", "canary.correct")
# Level at which the canary audit refutes a run's accounted ε and blocks its publication.
# The reported bound is at 95 % (the audit literature's convention), which a truly DP run
# exceeds in up to 5 % of runs: a gate there would refuse up to one honest cell in twenty.
# It cannot be much stricter: the δ term of the p-value floors it near 2mδ over the
# expected wrong guesses, so at 0.001 not even a release of all 581 of the bench's canaries
# would refute ε = 1 (docs/architecture.md, "Record integrity").
GATE_BETA = 0.01


class PublicationRefused(ValueError):
    """A record or entry the harness will not sign or publish (:func:`publication_refusal`)."""


def publication_refusal(document: dict[str, Any]) -> str | None:
    """Why ``document`` (a run record or an entry) is never signed, and ``leaderboard
    verify`` refuses it, else None: its canary audit refutes its ε, or it ran a method that
    is not built in off the public schedule (a tuning report names no method: its
    candidates' records are checked one by one)."""
    refuted, method = canary_refutation(document), document.get("method")
    if refuted or not isinstance(method, dict):
        return refuted
    call_seconds = document.get("spec", {}).get("privacy", {}).get("call_seconds")
    left_open = document.get("privacy", {}).get("open_on_schedule")
    return schedule_refusal(method["name"], call_seconds, left_open)


def schedule_refusal(
    method: str, call_seconds: float | None, left_open: Sequence[str] | None = ()
) -> str | None:
    """Why a run of ``method`` on the schedule ``call_seconds`` (``privacy.call_seconds``,
    None when unset) may not be published, else None. Client code chooses how long a pool
    call takes, and the method process can time its calls; only a public schedule closes
    that channel, so a method whose code is not the operator's own (built in, or imported
    by this process) is published only on one, and only where its host closed every
    timing channel the schedule covers (``left_open``: the record's
    ``privacy.open_on_schedule``, e.g. the kernel's caches where the coordinator was not
    root; None where a record or entry does not say, which is refused too; docs/architecture.md,
    "What leaves client code")."""
    from benchmark.registry import METHODS

    if METHODS.is_reviewed(method):
        return None
    if call_seconds is None:
        return (
            f"{method} is third-party code and ran without privacy.call_seconds: its "
            "client code could signal through how long its pool calls take, so it is "
            "published only on a public schedule (fedsynth submit --call-seconds)"
        )
    if left_open is None:
        return (
            f"{method} is third-party code and its record does not say what its host left "
            "open on the schedule (privacy.open_on_schedule; a record from before it)"
        )
    if left_open:
        return (
            f"{method} is third-party code and its host left open on the schedule: "
            f"{', '.join(left_open)} (the coordinator could not drop or lock those caches; "
            "run it as root on a host with room to lock the read set)"
        )
    return None


def canary_refutation(document: dict[str, Any]) -> str | None:
    """Why the canary audit refutes the accounted ε of ``document`` (a run record, or an
    entry: any of its seeds), else None. Such a release shows more than its ledger allows
    (a bug in a mechanism, or a method that leaks around it), so it is never signed and
    ``leaderboard verify`` refuses it. A seed's recorded outcome (m, r, v) refutes ε when
    its corrected p-value is below :data:`GATE_BETA`, so a truly ε-DP run is refused with
    probability at most that; an audit recorded without its counts is judged by its bound."""
    claimed = document.get("privacy", {}).get("epsilon")
    if claimed is None or claimed == "inf":
        return None
    epsilon, delta = float(claimed), float(document["privacy"].get("delta", 0.0))
    reasons = [_refutes(seed, epsilon, delta) for seed in _canary_outcomes(document)]
    return next((r for r in reasons if r is not None), None)


def _canary_outcomes(document: dict[str, Any]) -> list[dict[str, float]]:
    """Each seed's canary numbers (bound and counts) from a record or an entry."""
    keys = (CANARY_BOUND, *CANARY_COUNTS)
    if "audit" in document:
        columns = {k: document["audit"].get(k, {}).get("values", []) for k in keys}
        seeds = len(columns[CANARY_BOUND])
        return [{k: v[i] for k, v in columns.items() if i < len(v)} for i in range(seeds)]
    metrics = document.get("metrics", {})
    return [{k: metrics[k] for k in keys if k in metrics}] if CANARY_BOUND in metrics else []


def _refutes(outcome: dict[str, float], epsilon: float, delta: float) -> str | None:
    """Why one seed's audit refutes (ε, δ), else None."""
    bound = float(outcome[CANARY_BOUND])
    if bound != bound:  # NaN: no audit
        return None
    counts = [outcome.get(k) for k in CANARY_COUNTS]
    if any(c is None or c != c for c in counts):
        if bound <= epsilon + 1e-9:
            return None
        return (
            f"the canary audit's ε lower bound {bound:.4g} exceeds the accounted ε "
            f"{epsilon:.4g}: the release reveals more than its ledger allows"
        )
    try:
        p = refutation_p_value(*(int(c) for c in counts), epsilon, delta)
    except ValueError as error:
        return f"the canary audit's counts are not an audit's outcome ({error})"
    if p >= GATE_BETA:
        return None
    return (
        f"the canary audit refutes the accounted ε {epsilon:.4g} at p = {p:.2g} < "
        f"{GATE_BETA:g} (its 95 % ε lower bound is {bound:.4g}): the release reveals more "
        "than its ledger allows"
    )


def audit_exceeds_epsilon(entry: dict[str, Any]) -> bool:
    """True when a seed's canary audit refutes the entry's accounted ε."""
    return canary_refutation(entry) is not None


# Bump when a metric's definition changes. 2: text metrics also score model releases (on
# texts sampled from the released model).
METRIC_DEFINITIONS_VERSION = 2


def version_definition(
    split_hashes: Sequence[str],
    metric_specs: Sequence[dict],
    downstream: dict[str, Any] | None = None,
    instrument: dict[str, str] | None = None,
    variant: str | None = None,
) -> dict[str, Any]:
    """What fixes a leaderboard version: its split versions and metric definitions (the
    metrics, their settings, the downstream protocol they share, the code's definitions)
    and the instrument they measure with (the profile's on-device LM, its tokenizer and
    the embedder: a new downstream model makes numbers incomparable). A profile
    ``variant`` (``cpu-gemma``: the family's instrument, another generator) gets versions
    of its own: a table shows one row per method, so a method's entries under two
    generators must not share one."""
    definition = {
        "splits": sorted(split_hashes),
        "metrics": sorted(json.dumps(m, sort_keys=True) for m in metric_specs),
        "downstream": downstream or {},
        "metric_definitions": METRIC_DEFINITIONS_VERSION,
    }
    if instrument:
        definition["instrument"] = dict(sorted(instrument.items()))
    if variant:
        definition["profile_variant"] = variant
    return definition


def version_of(definition: dict[str, Any]) -> str:
    digest = hashlib.sha256(json.dumps(definition, sort_keys=True).encode()).hexdigest()
    return f"lb-{digest[:10]}"


def integrity_digest(entry: dict[str, Any]) -> str:
    """sha256 of the entry minus its digest and signature (the signature, added after the
    digest, covers the digest; see leaderboard/signing.py)."""
    body = {k: v for k, v in entry.items() if k not in ("integrity", "signature")}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def content_digest(document: dict[str, Any]) -> str:
    """sha256 of ``document`` minus its signature, as canonical JSON (after a JSON round
    trip, so a record in memory and the same record read back from the store agree). An
    entry lists its run records' digests and the store's signed index every file's, so an
    edited record never matches, whoever re-signs it."""
    body = json.loads(json.dumps({k: v for k, v in document.items() if k != "signature"}))
    return hashlib.sha256(
        json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()


def entry_key(run_key: str, seed: int) -> str:
    marker = f"__seed{seed}__"
    if marker not in run_key:
        raise EntryError(f"run key {run_key!r} does not contain {marker!r}")
    return run_key.replace(marker, "__", 1)


def _numeric_metrics(record: dict[str, Any]) -> dict[str, float]:
    return {
        k: float(v)
        for k, v in record["metrics"].items()
        if isinstance(v, int | float) and not isinstance(v, bool)
    }


def _epsilon_value(value: float | str) -> float:
    return float("inf") if value == "inf" else float(value)


def _epsilon_json(value: float) -> float | str:
    return "inf" if value == float("inf") else value


def _group_epsilons(run_records: list[dict[str, Any]]) -> dict[str, Any]:
    """Each client group's ε, the worst over the seeds (grouped ledgers only: paper 001's
    strong and weak clients pay for different phases; ``epsilon`` is the worst group's)."""
    by_run = [r["privacy"].get("group_epsilons") for r in run_records]
    if not all(by_run):
        return {}
    worst = {group: max(_epsilon_value(groups[group]) for groups in by_run) for group in by_run[0]}
    return {"group_epsilons": {g: _epsilon_json(e) for g, e in worst.items()}}


def _open_on_schedule(run_records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """What any seed's host left open on the schedule (absent unless every seed says)."""
    named = [r["privacy"].get("open_on_schedule") for r in run_records]
    if any(n is None for n in named):  # a seed that does not say: the entry does not either
        return {}
    return {"open_on_schedule": sorted(set().union(*named))}


def _instruments(run_records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The start models the seeds were measured from (benchmark.instrument): one digest when
    every seed used the same build; records from before the digest give none."""
    digests = {r.get("instrument", {}).get("start_sha256") for r in run_records} - {None}
    return {"instruments": sorted(digests)} if digests else {}


def build_entry(
    run_records: Sequence[dict[str, Any]],
    lb_version: str,
    variant: str | None = None,
    control: bool = False,
) -> dict[str, Any]:
    """Aggregate the run records of one configuration (one per seed, in seed order, so the
    same records always make the same entry) into an entry; ``variant`` names the paper's
    row it is, when a suite runs one method under several named configurations.
    ``control`` marks a variant its suite declares a control (shown, never ranked: a row
    without private data or without noise); only a variant can be one, and a record's role
    can only be lowered so, never raised to a bound."""
    if control and not variant:
        raise EntryError("only a suite's variant can be declared a control")
    if not run_records:
        raise EntryError("an entry needs at least one run record")
    run_records = sorted(run_records, key=lambda r: int(r["spec"]["seed"]))
    first = run_records[0]
    keys = {entry_key(r["run_key"], r["spec"]["seed"]) for r in run_records}
    if len(keys) != 1:
        raise EntryError(f"run records of different configurations: {sorted(keys)}")
    per_seed = [_numeric_metrics(r) for r in run_records]
    names = sorted(set.intersection(*(set(m) for m in per_seed)))
    summaries = {}
    for name in names:
        values = [m[name] for m in per_seed]
        summaries[name] = {**summarize(values).as_dict(), "values": values}
    epsilons = [_epsilon_value(r["privacy"]["epsilon"]) for r in run_records]
    eps = max(epsilons)
    spec = dict(first["spec"])
    spec["seeds"] = sorted(r["spec"]["seed"] for r in run_records)
    spec.pop("seed", None)
    # Counters every run has (records before issue 33 also hold measured client seconds).
    shared = [k for k in first["costs"] if all(k in r["costs"] for r in run_records)]
    costs = {k: sum(r["costs"][k] for r in run_records) / len(run_records) for k in shared}
    entry = {
        "schema_version": ENTRY_SCHEMA_VERSION,
        "leaderboard_version": lb_version,
        "entry_key": keys.pop(),
        "spec": spec,
        "split": first["split"],
        "contamination": first["contamination"],
        "method": {**first["method"], "role": "control"} if control else first["method"],
        **({"variant": variant} if variant else {}),
        "privacy": {
            **{k: first["privacy"][k] for k in ("epsilon_budget", "delta", "unit", "accountant")},
            "guarantee": first["privacy"]["guarantee"],
            "noise_seed": first["privacy"]["noise_seed"],
            # records from before the statement have none; an entry then says nothing
            **{k: first["privacy"][k] for k in ("unit_statement",) if k in first["privacy"]},
            "epsilon": _epsilon_json(eps),
            "ledgers": [r["privacy"]["ledger"] for r in run_records],
            **_group_epsilons(run_records),
            **_open_on_schedule(run_records),
        },
        "metrics": {k: v for k, v in summaries.items() if not k.startswith(AUDIT_PREFIXES)},
        "audit": {k: v for k, v in summaries.items() if k.startswith(AUDIT_PREFIXES)},
        "costs": costs,
        "hardware": first["hardware"],
        "wall_seconds": sum(r["wall_seconds"] for r in run_records),
        "code_version": first["code_version"],
        "packages": first["packages"],
        "runs": [r["run_key"] for r in run_records],
        **_instruments(run_records),
        **entry_client_hits(run_records),
        "run_digests": [content_digest(r) for r in run_records],
    }
    entry["integrity"] = integrity_digest(entry)
    validate_entry(entry)
    return entry
