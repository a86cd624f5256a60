"""Run one spec: split → client pool → method rounds → budget check → evaluation → record.

State is written under ``runs/<run-key>/`` after every round (method state, pool state,
ledger, counters), so starting the same spec again resumes where it stopped and reaches
the same result as an uninterrupted run: all randomness is derived from the spec's seed
and the round index, never from the process.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from benchmark.artifact import Artifact
from benchmark.data import FederatedSplit, group_by_client
from benchmark.federation.pool import ClientPool
from benchmark.federation.quarantine import Diagnostics
from benchmark.method import Method, MethodContext
from benchmark.privacy.errors import BudgetExceededError
from benchmark.privacy.ledger import PrivacyLedger
from benchmark.progress import progress
from benchmark.records import build_record, write_record
from benchmark.registry import METHODS
from benchmark.spec import ResolvedSpec, RunSpec, SpecError

CHECKPOINT = "checkpoint.pt"
ARTIFACT = "artifact.json"
RESULT = "result.json"
POOL_SEED = "pool_seed.secret"


class RunInterrupted(RuntimeError):
    """Raised by ``stop_after_round`` to simulate a killed run (used by tests)."""


@dataclass
class RunResult:
    run_key: str
    run_dir: Path
    record: dict[str, Any]
    artifact: Artifact


def load_run_split(spec: RunSpec) -> FederatedSplit:
    from datasets_builders.storage import load_split

    split = load_split(Path(spec.split.path))
    if spec.split.content_hash and spec.split.content_hash != split.content_hash:
        raise SpecError(
            f"split.content_hash: spec pins {spec.split.content_hash} but {spec.split.path} "
            f"has {split.content_hash}"
        )
    return split


def resolve(spec: RunSpec, split: FederatedSplit) -> tuple[ResolvedSpec, type[Method]]:
    method_cls = METHODS.get(spec.method.name)
    if spec.privacy.unit not in method_cls.privacy_units:
        raise SpecError(
            f"privacy.unit: {spec.privacy.unit!r} is not supported by {spec.method.name!r}; "
            f"allowed: {list(method_cls.privacy_units)}"
        )
    config = method_cls.resolve_config(spec.profile, spec.method.params)
    return ResolvedSpec(spec, config, split.name, split.version), method_cls


def privacy_units(split: FederatedSplit, unit: str) -> dict[str, list[dict[str, Any]]]:
    """Group the private train records by privacy unit: a client (user) or one sample."""
    records = split.records("train")
    if unit == "user":
        return group_by_client(records)
    return {f"{i:08d}": [r] for i, r in enumerate(records)}


def ledger_epsilon(ledger: PrivacyLedger, spec: RunSpec) -> float:
    from benchmark.privacy.accountants import epsilon_from_ledger

    return epsilon_from_ledger(ledger.releases, spec.privacy.delta, spec.privacy.accountant)


def check_budget(ledger: PrivacyLedger, spec: RunSpec) -> float:
    """ε of the ledger; raises if it exceeds the spec's budget (tolerance 1e-9)."""
    eps = ledger_epsilon(ledger, spec)
    budget = spec.privacy.epsilon
    if not math.isinf(budget) and eps > budget + 1e-9:
        raise BudgetExceededError(eps, budget, spec.privacy.accountant)
    return eps


def pool_seed(spec: RunSpec, run_dir: Path) -> int:
    """Seed of the pool's private randomness (noise, sampling, cohorts): the spec's seed when
    ``privacy.noise_seed`` is ``spec``; otherwise a secret 128-bit seed drawn once per run and
    kept in the run directory (private state, like the checkpoint), so a resumed run draws
    the same noise and no published record can regenerate it."""
    if spec.privacy.noise_seed == "spec":
        return spec.seed
    path = run_dir / POOL_SEED
    if not path.exists():
        tmp = path.with_suffix(".tmp")
        tmp.write_text(str(secrets.randbits(128)))
        os.replace(tmp, path)
    return int(path.read_text())


def _seed_torch(seed: int, round_index: int) -> None:
    torch.manual_seed(seed * 1_000_003 + round_index + 1)


def _save_checkpoint(run_dir: Path, payload: dict[str, Any]) -> None:
    tmp = run_dir / (CHECKPOINT + ".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, run_dir / CHECKPOINT)


def run(
    spec: RunSpec,
    *,
    runs_root: Path = Path("runs"),
    stop_after_round: int | None = None,
    profile: Any = None,
    split: FederatedSplit | None = None,
) -> RunResult:
    """Run (or resume) ``spec``; returns its result record and artifact.

    ``profile`` and ``split`` may be passed in when the caller already holds them (the
    quickstart, tests); otherwise they are loaded from the spec.
    """
    split = split or load_run_split(spec)
    resolved, method_cls = resolve(spec, split)
    run_dir = runs_root / resolved.run_key
    if (run_dir / RESULT).exists():  # finished before: the record is the result
        record = json.loads((run_dir / RESULT).read_text())
        return RunResult(resolved.run_key, run_dir, record, Artifact.load(run_dir / ARTIFACT))
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "spec.json").write_text(json.dumps(resolved.to_dict(), indent=1))
    if profile is None:
        from benchmark.profiles import new_profile

        profile = new_profile(spec.profile)

    ledger = PrivacyLedger()
    pool = ClientPool(
        privacy_units(split, spec.privacy.unit),
        ledger=ledger,
        seed=pool_seed(spec, run_dir),
        unit=spec.privacy.unit,
        allow_nonprivate=math.isinf(spec.privacy.epsilon),
    )
    work_dir = run_dir / "work"
    work_dir.mkdir(exist_ok=True)
    ctx = MethodContext(
        pool=pool,
        public=split.records("public"),
        validation=split.records("validation"),
        profile=profile,
        privacy=spec.privacy,
        seed=spec.seed,
        work_dir=work_dir,
        diagnostics=Diagnostics(run_dir),
    )
    method = method_cls(resolved.method_config)

    checkpoint_path = run_dir / CHECKPOINT
    if checkpoint_path.exists():
        saved = torch.load(checkpoint_path, weights_only=False)
        start, state, elapsed = saved["next_round"], saved["method_state"], saved["elapsed"]
        pool.load_state_dict(saved["pool"])
        ledger.releases[:] = PrivacyLedger.from_json(saved["ledger"]).releases
    else:
        _seed_torch(spec.seed, -1)
        start, state, elapsed = 0, method.setup(ctx), 0.0

    began = time.perf_counter()
    rounds = range(start, method.num_rounds())
    for r in progress(rounds, f"{spec.method.name} rounds", total=len(rounds), unit="round"):
        _seed_torch(spec.seed, r)
        state = method.round(ctx, state, r)
        check_budget(ledger, spec)
        _save_checkpoint(
            run_dir,
            {
                "next_round": r + 1,
                "method_state": state,
                "pool": pool.state_dict(),
                "ledger": ledger.to_json(),
                "elapsed": elapsed + time.perf_counter() - began,
            },
        )
        if stop_after_round is not None and r + 1 >= stop_after_round:
            raise RunInterrupted(f"stopped after round {r + 1} (checkpoint in {run_dir})")

    _seed_torch(spec.seed, method.num_rounds())
    artifact = method.finish(ctx, state)
    epsilon = check_budget(ledger, spec)
    artifact.save(run_dir / ARTIFACT)
    method_seconds = elapsed + time.perf_counter() - began

    report = evaluate_artifact(
        artifact, spec, split, profile, run_dir, pool.costs.summary(), public_start_of(ctx)
    )
    record = build_record(
        resolved=resolved,
        split=split,
        epsilon=epsilon,
        ledger=ledger,
        metrics=flatten_metrics(report),
        evaluation=report,
        costs={
            **pool.costs.summary(),
            "server_seconds": max(method_seconds - pool.costs.client_seconds, 0.0),
        },
        wall_seconds=method_seconds,
        profile=profile,
        role=method_cls.role,
    )
    write_record(record, run_dir / RESULT)
    return RunResult(resolved.run_key, run_dir, record, artifact)


def evaluate_artifact(
    artifact: Artifact,
    spec: RunSpec,
    split: FederatedSplit,
    profile: Any,
    run_dir: Path,
    costs: dict[str, float],
    start_model: Any = None,
) -> dict[str, Any]:
    """Evaluate the artifact; returns the evaluator's full report (metrics by label)."""
    if not spec.evaluation.metrics:
        return {"metrics": {}, "settings": {}, "skipped": {}}
    from benchmark.evaluation.base import EvalContext, evaluate

    eval_dir = run_dir / "eval"
    eval_dir.mkdir(exist_ok=True)
    _seed_torch(spec.seed, -2)
    ctx = EvalContext(
        split=split,
        profile=profile,
        seed=spec.seed,
        work_dir=eval_dir,
        costs=costs,
        downstream=downstream_config(spec),
        start_model=start_model,
    )
    metric_specs = [{"name": m["name"], **m["settings"]} for m in spec.evaluation.metrics]
    return evaluate(artifact, ctx, metric_specs)


def public_start_of(ctx: MethodContext) -> Any:
    """The shared public starting point (the on-device LM fine-tuned on public data with
    the profile's recipe): released text sets are fine-tuned from it, as the
    federated baselines are, so every method starts from the same model."""
    from benchmark.training import PUBLIC_START_CONFIGS, public_start

    return lambda: public_start(ctx, PUBLIC_START_CONFIGS[ctx.profile.name])


def downstream_config(spec: RunSpec) -> Any:
    from benchmark.evaluation.downstream import DownstreamConfig

    try:
        return DownstreamConfig(**spec.evaluation.downstream)
    except TypeError as exc:
        allowed = sorted(DownstreamConfig.__dataclass_fields__)
        raise SpecError(f"evaluation.downstream: {exc}; allowed fields: {allowed}") from exc


def flatten_metrics(report: dict[str, Any]) -> dict[str, float]:
    """``{"fid": {"fid": 3.1}}`` → ``{"fid.fid": 3.1}``: the numbers tables are built from."""
    return {
        f"{label}.{key}": float(value)
        for label, values in report["metrics"].items()
        for key, value in values.items()
        if isinstance(value, int | float) and not isinstance(value, bool)
    }
