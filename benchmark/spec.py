"""Run specs: what a run is, validated, resolved to an explicit config and a canonical key.

A spec is plain data (YAML or JSON). :func:`load_spec` validates it and fails with a
message naming the field and the allowed values; :func:`resolve` merges the method's
defaults for the profile so the recorded config is fully explicit; :func:`run_key` gives
the canonical name used as run directory and leaderboard key.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from benchmark import profiles
from benchmark.privacy.accountants import ACCOUNTANTS
from benchmark.registry import NAME_PATTERN, PATH_PART_PATTERN, valid_name

# client_sample: sample-level DP per client (paper 001's cross-silo setting): the pool keeps
# the clients, and each client's releases are DP with respect to its own samples.
PRIVACY_UNITS = ("user", "sample", "central", "client_sample")
GUARANTEES = ("formal", "simulated")
NOISE_SEEDS = ("secret", "spec")
PROFILES = tuple(profiles.PROFILES)


class SpecError(ValueError):
    """A spec field is missing or has a value outside its allowed set."""


@dataclass(frozen=True)
class SplitRef:
    """Where the split lives on disk; ``content_hash`` pins it (checked when given)."""

    path: str
    content_hash: str = ""


@dataclass(frozen=True)
class MethodSpec:
    name: str
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PrivacySpec:
    """The budget; ``epsilon=inf`` is the non-private bound, ``epsilon=0`` uses no private data.

    ``noise_seed`` is where the harness's private randomness (DP noise, client sampling,
    cohorts) comes from: ``secret`` (default) draws a fresh seed per run and keeps it only in
    the run directory, so nobody can regenerate the noise from a published record; ``spec``
    derives it from the spec's seed, which makes a run bit-reproducible from its spec but
    lets anyone holding the record subtract the noise, so it requires ``guarantee: simulated``.

    ``delta`` must lie in (0, 1), and the runner refuses δ ≥ 1/(number of privacy units)
    unless ``allow_large_delta``: such a δ is met by a mechanism that publishes a randomly
    chosen unit's data outright. The option is recorded (in the resolved spec, hence the
    run key, record and entry) only when set, so the keys of ordinary specs do not change.

    ``call_seconds`` closes the timing channel of the isolated path: client code chooses how
    long a pool call takes, and the method process can time its calls. When set, the
    method process is stopped while a call is served and gets each answer exactly that
    many seconds after its request (a public schedule, fixed before any client runs); a
    call whose work takes longer stops the run. Unset (the default), the channel is open
    (docs/architecture.md, "What leaves client code"). Recorded, like
    ``allow_large_delta``, only when set.
    """

    epsilon: float
    delta: float
    unit: str = "user"
    accountant: str = "rdp"
    guarantee: str = "formal"
    noise_seed: str = "secret"
    allow_large_delta: bool = False
    call_seconds: float | None = None


@dataclass(frozen=True)
class EvalSpec:
    """Metrics by registered name, each with its settings, and the downstream-training
    overrides (fields of ``benchmark.evaluation.downstream.DownstreamConfig``)."""

    metrics: tuple[dict[str, Any], ...] = ()
    downstream: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RunSpec:
    split: SplitRef
    method: MethodSpec
    privacy: PrivacySpec
    evaluation: EvalSpec = EvalSpec()
    seed: int = 0
    profile: str = "tiny"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["privacy"]["epsilon"] = _encode_epsilon(self.privacy.epsilon)
        if not self.privacy.allow_large_delta:
            del data["privacy"]["allow_large_delta"]
        if self.privacy.call_seconds is None:
            del data["privacy"]["call_seconds"]
        data["evaluation"]["metrics"] = list(self.evaluation.metrics)
        return data


def _encode_epsilon(eps: float) -> float | str:
    return "inf" if math.isinf(eps) else eps


def _choice(where: str, value: Any, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise SpecError(f"{where}: {value!r} is not one of {list(allowed)}")
    return value


def _fields(where: str, data: Any, allowed: tuple[str, ...], required: tuple[str, ...]) -> dict:
    if not isinstance(data, dict):
        raise SpecError(f"{where}: expected a mapping, got {type(data).__name__}")
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        raise SpecError(f"{where}.{unknown[0]}: unknown field; allowed fields: {list(allowed)}")
    for name in required:
        if name not in data:
            raise SpecError(f"{where}.{name}: required field is missing")
    return data


def _number(where: str, value: Any, low: float, high: float, *, inf_ok: bool = False) -> float:
    if isinstance(value, str) and value.strip().lower() in ("inf", "infinity", ".inf") and inf_ok:
        return math.inf
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SpecError(f"{where}: expected a number, got {value!r}")
    value = float(value)
    if math.isinf(value) and inf_ok:
        return value
    if not (low <= value <= high) or math.isnan(value):
        raise SpecError(f"{where}: {value!r} is outside the allowed range [{low}, {high}]")
    return value


def _open_unit(where: str, value: Any) -> float:
    """A probability strictly between 0 and 1 (δ = 0 breaks the accountants, δ = 1 means
    no guarantee at all)."""
    value = _number(where, value, -math.inf, math.inf)
    if not 0.0 < value < 1.0:
        raise SpecError(f"{where}: {value!r} is outside the allowed range (0, 1)")
    return value


def _flag(where: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise SpecError(f"{where}: expected true or false, got {value!r}")
    return value


def _method_name(value: Any) -> str:
    """The method's registered name; it becomes part of paths and markup, so it must match
    the registry's name pattern."""
    if not valid_name(value):
        raise SpecError(f"method.name: {value!r} must match ^{NAME_PATTERN.pattern}$")
    return value


def _split_path(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise SpecError(f"split.path: expected a non-empty path, got {value!r}")
    return value


def spec_from_dict(data: dict[str, Any]) -> RunSpec:
    """Validate a spec mapping; every error names its field."""
    top = ("split", "method", "privacy", "evaluation", "seed", "profile")
    data = _fields("spec", data, top, ("split", "method", "privacy"))
    split = _fields("split", data["split"], ("path", "content_hash"), ("path",))
    method = _fields("method", data["method"], ("name", "params"), ("name",))
    if not isinstance(method.get("params", {}), dict):
        raise SpecError("method.params: expected a mapping")
    privacy = _fields(
        "privacy",
        data["privacy"],
        (
            "epsilon", "delta", "unit", "accountant", "guarantee", "noise_seed",
            "allow_large_delta", "call_seconds",
        ),
        ("epsilon", "delta"),
    )  # fmt: skip
    call_seconds = privacy.get("call_seconds")
    if call_seconds is not None:
        call_seconds = _number("privacy.call_seconds", call_seconds, 1e-3, 86_400.0)
    guarantee = _choice("privacy.guarantee", privacy.get("guarantee", "formal"), GUARANTEES)
    noise_seed = _choice("privacy.noise_seed", privacy.get("noise_seed", "secret"), NOISE_SEEDS)
    if noise_seed == "spec" and guarantee == "formal":
        raise SpecError(
            "privacy.noise_seed: 'spec' makes the DP noise reproducible from the published spec, "
            "so the guarantee cannot be formal; set privacy.guarantee: simulated"
        )
    evaluation = _fields("evaluation", data.get("evaluation", {}), ("metrics", "downstream"), ())
    downstream = evaluation.get("downstream", {})
    if not isinstance(downstream, dict):
        raise SpecError("evaluation.downstream: expected a mapping")
    metrics = []
    for i, metric in enumerate(evaluation.get("metrics", [])):
        if isinstance(metric, str):
            metric = {"name": metric}
        _fields(f"evaluation.metrics[{i}]", metric, ("name", "settings"), ("name",))
        metrics.append({"name": metric["name"], "settings": dict(metric.get("settings", {}))})
    seed = data.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise SpecError(f"seed: expected a non-negative integer, got {seed!r}")
    return RunSpec(
        split=SplitRef(_split_path(split["path"]), str(split.get("content_hash", ""))),
        method=MethodSpec(_method_name(method["name"]), dict(method.get("params", {}))),
        privacy=PrivacySpec(
            epsilon=_number("privacy.epsilon", privacy["epsilon"], 0.0, math.inf, inf_ok=True),
            delta=_open_unit("privacy.delta", privacy["delta"]),
            unit=_choice("privacy.unit", privacy.get("unit", "user"), PRIVACY_UNITS),
            accountant=_choice("privacy.accountant", privacy.get("accountant", "rdp"), ACCOUNTANTS),
            guarantee=guarantee,
            noise_seed=noise_seed,
            allow_large_delta=_flag(
                "privacy.allow_large_delta", privacy.get("allow_large_delta", False)
            ),
            call_seconds=call_seconds,
        ),
        evaluation=EvalSpec(tuple(metrics), dict(downstream)),
        seed=seed,
        profile=_choice("profile", data.get("profile", "tiny"), PROFILES),
    )


def load_spec(path: str | Path) -> RunSpec:
    """Read a YAML or JSON spec file. JSON is parsed as JSON first: YAML 1.1 reads a JSON
    number such as ``1e-05`` (no dot) as a string."""
    try:
        text = Path(path).read_text()
        data = _json_or_none(text)
        data = yaml.safe_load(text) if data is None else data
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        reason = " ".join(str(exc).split())  # YAML errors span lines; errors here are one
        raise SpecError(f"{path}: not a readable YAML/JSON spec: {reason}") from exc
    return spec_from_dict(data)


def _json_or_none(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return None


@dataclass(frozen=True)
class ResolvedSpec:
    """A spec whose method config is explicit (defaults of the profile merged in)."""

    spec: RunSpec
    method_config: dict[str, Any]
    split_name: str
    split_version: str

    def to_dict(self) -> dict[str, Any]:
        data = self.spec.to_dict()
        data["method"]["config"] = self.method_config
        data["split"]["name"] = self.split_name
        data["split"]["version"] = self.split_version
        return data

    @property
    def run_key(self) -> str:
        return run_key(self)


def run_key(resolved: ResolvedSpec) -> str:
    """Readable canonical key plus a hash of the resolved spec without its seed.

    Runs that differ only in the seed share the digest, so the leaderboard groups them
    into one entry by dropping the ``seed<N>`` part. The key names a directory, so the
    split's name and version (read from a manifest, or passed in) and the method name are
    checked to be plain file-name parts first.
    """
    spec = resolved.spec
    _path_part("split.name", resolved.split_name)
    _path_part("split.version", resolved.split_version)
    _method_name(spec.method.name)
    config = {k: v for k, v in resolved.to_dict().items() if k != "seed"}
    digest = hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[
        :10
    ]
    eps = "inf" if math.isinf(spec.privacy.epsilon) else f"{spec.privacy.epsilon:g}"
    return (
        f"{resolved.split_name}@{resolved.split_version}__{spec.method.name}__eps{eps}"
        f"__{spec.privacy.unit}__seed{spec.seed}__{spec.profile}__{digest}"
    )


def _path_part(where: str, value: object) -> None:
    if not isinstance(value, str) or PATH_PART_PATTERN.fullmatch(value) is None:
        raise SpecError(f"{where}: {value!r} must match ^{PATH_PART_PATTERN.pattern}$")
