"""The leaderboard entry schema, checked on every write and every read."""

from __future__ import annotations

from typing import Any

import jsonschema

from benchmark.method import ROLES
from benchmark.registry import NAME_PATTERN
from benchmark.spec import ACCOUNTANTS, GUARANTEES, NOISE_SEEDS, PRIVACY_UNITS
from leaderboard.client_hits import PER_CLIENT_SCHEMA

ENTRY_SCHEMA_VERSION = 1

_NUMBER_OR_INF = {"anyOf": [{"type": "number"}, {"const": "inf"}]}
_SUMMARY = {
    "type": "object",
    "required": ["n", "mean", "std", "ci_low", "ci_high", "confidence", "values"],
    "properties": {
        "n": {"type": "integer", "minimum": 1},
        "mean": {"type": "number"},
        "std": {"type": ["number", "null"]},
        "ci_low": {"type": ["number", "null"]},
        "ci_high": {"type": ["number", "null"]},
        "confidence": {"type": "number"},
        "values": {"type": "array", "items": {"type": "number"}},
    },
}

ENTRY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": [
        "schema_version",
        "leaderboard_version",
        "entry_key",
        "spec",
        "split",
        "contamination",
        "method",
        "privacy",
        "metrics",
        "audit",
        "costs",
        "hardware",
        "wall_seconds",
        "code_version",
        "packages",
        "runs",
        "integrity",
    ],
    "additionalProperties": False,
    "properties": {
        "schema_version": {"const": ENTRY_SCHEMA_VERSION},
        "leaderboard_version": {"type": "string", "pattern": "^lb-[0-9a-f]{10}$"},
        "entry_key": {"type": "string", "minLength": 1},
        "spec": {"type": "object"},
        "split": {
            "type": "object",
            "required": ["name", "version", "content_hash"],
            "properties": {k: {"type": "string"} for k in ("name", "version", "content_hash")},
        },
        "contamination": {
            "type": "object",
            "required": ["model", "verdict", "reason"],
            "properties": {"verdict": {"enum": ["clean", "contaminated", "unknown"]}},
        },
        "method": {
            "type": "object",
            "required": ["name", "config"],
            "properties": {
                "name": {"type": "string"},
                "role": {"enum": list(ROLES)},  # absent in entries from before roles: method
                "config": {"type": "object"},
            },
        },
        # the paper's named row the entry is (leaderboard.suites.Variant), when one method
        # has several rows at one ε; absent for a plain method row
        "variant": {"type": "string", "pattern": f"^{NAME_PATTERN.pattern}$"},
        "privacy": {
            "type": "object",
            "required": [
                "epsilon",
                "epsilon_budget",
                "delta",
                "unit",
                "accountant",
                "guarantee",
                "ledgers",
            ],
            "properties": {
                "epsilon": _NUMBER_OR_INF,
                "epsilon_budget": _NUMBER_OR_INF,
                "delta": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
                "unit": {"enum": list(PRIVACY_UNITS)},
                "unit_statement": {"type": "string"},
                "accountant": {"enum": list(ACCOUNTANTS)},
                "guarantee": {"enum": list(GUARANTEES)},
                "noise_seed": {"enum": list(NOISE_SEEDS)},
                "ledgers": {"type": "array", "items": {"type": "array"}, "minItems": 1},
                "group_epsilons": {"type": "object", "additionalProperties": _NUMBER_OR_INF},
                # what the host could not close on the public schedule (absent off it)
                "open_on_schedule": {"type": "array", "items": {"type": "string"}},
            },
        },
        "metrics": {"type": "object", "additionalProperties": _SUMMARY},
        "audit": {"type": "object", "additionalProperties": _SUMMARY},
        "costs": {"type": "object", "additionalProperties": {"type": "number"}},
        "hardware": {"type": "object"},
        "wall_seconds": {"type": "number", "minimum": 0},
        "code_version": {"type": "string"},
        "packages": {"type": "object", "additionalProperties": {"type": "string"}},
        "runs": {"type": "array", "items": {"type": "string"}, "minItems": 1},
        # sha256 of each start model the seeds were measured from (benchmark.instrument)
        "instruments": {
            "type": "array",
            "items": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
            "minItems": 1,
        },
        # Per-client next-token hits of the seeds (absent in entries from before them).
        "per_client": PER_CLIENT_SCHEMA,
        # content_digest of each run's record, in the order of `runs` (absent in entries
        # from before entries bound their records): an edited kept record never matches.
        "run_digests": {"type": "array", "items": {"type": "string", "pattern": "^[0-9a-f]{64}$"}},
        "integrity": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
        # Ed25519 over the rest of the entry (leaderboard/signing.py); `leaderboard verify`
        # refuses an entry without one unless told --allow-unsigned.
        "signature": {
            "type": "object",
            "required": ["key_id", "algorithm", "value"],
            "additionalProperties": False,
            "properties": {
                "key_id": {"type": "string", "pattern": "^[0-9a-f]{16}$"},
                "algorithm": {"const": "ed25519"},
                "value": {"type": "string", "pattern": "^[0-9a-f]{128}$"},
            },
        },
    },
}


class EntryError(ValueError):
    """A leaderboard entry is malformed, tampered with, or inconsistent."""


def validate_entry(entry: dict[str, Any]) -> None:
    try:
        jsonschema.validate(entry, ENTRY_SCHEMA)
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(entry)"
        raise EntryError(f"schema: {where}: {exc.message}") from exc
