"""Run one spec: split → client pool → method rounds → budget check → evaluation → record.

State is written under ``runs/<run-key>/`` after every round (method state, pool state,
ledger, counters), so starting the same spec again resumes where it stopped and reaches
the same result as an uninterrupted run: all randomness is derived from the spec's seed
and the round index, never from the process.

A run that fails (any error: a budget refusal, a privacy error, a method's exception) is
quarantined: its directory moves to ``runs/.quarantine/`` and the next run of the spec starts
afresh, with a new secret seed, never reading the failed run's checkpoint, scratch or
releases. Only a run whose process died (killed, interrupted) resumes. Every release a
private run delivers is logged first (:mod:`benchmark.federation.release_log`), so the
resumed method gets the values it was given, never a second draw of their noise.

Run directories share a host with other submissions' runs, so nothing read back from them
may run code: a checkpoint is loaded with ``weights_only=True`` (tensors, plain data and
the few data-only types of :data:`benchmark.checkpoints.CHECKPOINT_TYPES`), and a state
that would not load that way is refused when it is saved, not when the run resumes.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import math
import os
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from benchmark.artifact import Artifact, ArtifactError
from benchmark.checkpoints import (
    UnsafeCheckpointError,
    load_checkpoint,
    save_checked,
    seed_torch,
)
from benchmark.data import FederatedSplit, group_by_client
from benchmark.evaluation.verbatim import check_release
from benchmark.federation.canaries import CanaryPlan, audited_units, plan_canaries
from benchmark.federation.client_calls import NoClients
from benchmark.federation.local_dp_sgd import LocalLMTrainer
from benchmark.federation.pool import INDEPENDENCE_CHECKS, ClientPool
from benchmark.federation.quarantine import Diagnostics
from benchmark.federation.release_log import ReleaseLog
from benchmark.files import Busy, atomic_write, exclusive_lock
from benchmark.instrument import instrument_section
from benchmark.method import Method, MethodContext
from benchmark.privacy.budget import Budget
from benchmark.privacy.errors import PrivacyError, ReleaseRefused
from benchmark.privacy.ledger import PrivacyLedger
from benchmark.profiles.base import bind_public
from benchmark.profiles.cache import sha256_file
from benchmark.profiles.candidate_corpus import build_requested
from benchmark.progress import progress
from benchmark.records import PUBLICATION_REFUSED, build_record, check_same_models, write_record
from benchmark.registry import METHODS, path_under
from benchmark.shared_rounds import (
    check_post_processing,
    donor_of,
    register_donor,
    rounds_identity,
    rounds_key,
)
from benchmark.spec import ResolvedSpec, RunSpec, SpecError

CHECKPOINT = "checkpoint.pt"
ARTIFACT = "artifact.json"
RESULT = "result.json"
REFUSED = "refused.json"  # the record of a release refused publication
POOL_SEED = "pool_seed.secret"
LOCK = "run.lock"
RELEASES = "releases"  # the release log (trusted state, like the checkpoint)
QUARANTINE = ".quarantine"  # failed runs' directories, under the runs root
ROUNDS_FROM = "rounds_from.json"  # the run whose private rounds this one post-processes
CHECKPOINT_KEYS = ("run_key", "next_round", "method_state", "pool", "ledger", "elapsed")


class RunInterrupted(RuntimeError):
    """Raised by ``stop_after_round`` to simulate a killed run (used by tests)."""


class RunBusy(Busy):
    """The run is being run by another process (its run directory's lock is held): two
    suite workers sharing a runs root skip each other's runs instead of corrupting them."""


@dataclass
class RunResult:
    run_key: str
    run_dir: Path
    record: dict[str, Any]
    artifact: Artifact


def load_run_split(spec: RunSpec) -> FederatedSplit:
    """The spec's split, checked against its manifest; a missing, unfinished or altered
    split is a spec error naming ``split.path``."""
    from benchmark.split_storage import IncompleteSplitError, SplitError, load_split

    try:
        split = load_split(Path(spec.split.path))
    except (IncompleteSplitError, SplitError) as exc:
        raise SpecError(f"split.path: {exc}") from exc
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
    """Group the private train records by privacy unit: a client (user) or one sample
    (``sample``, ``central``, ``client_sample``: the pool regroups the latter's samples by
    the client each record names)."""
    records = split.records("train")
    if unit == "user":
        return group_by_client(records)
    return {f"{i:08d}": [r] for i, r in enumerate(records)}


def canary_plan(
    spec: RunSpec, units: dict[str, list[dict[str, Any]]], seed: int
) -> CanaryPlan | None:
    """The run's canaries (real train units) when its evaluation lists the ``canary``
    audit, else None."""
    if not any(m["name"] == "canary" for m in spec.evaluation.metrics):
        return None
    try:
        return plan_canaries(
            units, seed, spec.privacy.delta, blind=spec.privacy.noise_seed != "spec"
        )
    except ValueError as exc:
        raise SpecError(f"evaluation.metrics: canary: {exc}") from exc


def check_delta(spec: RunSpec, units: int) -> None:
    """Refuse δ ≥ 1/N for N privacy units unless the spec allows it explicitly: at such a
    δ, publishing a randomly chosen unit's data verbatim is (0, δ)-DP, so the ε reported
    beside it promises nothing (a run at δ = 0.5 was once ranked)."""
    delta = spec.privacy.delta
    if units and delta >= 1 / units and not spec.privacy.allow_large_delta:
        raise SpecError(
            f"privacy.delta: {delta:g} is not below 1/{units}, one over the number of "
            f"{spec.privacy.unit}-level privacy units in the split's train part; lower it, or "
            "set privacy.allow_large_delta: true (the record shows it)"
        )


def own_copy(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The method's own copy of a part's records (their values are immutable): a suite
    hands one loaded split to every run, so a method editing the records it was given must
    not change what the next method trains on or is selected with."""
    return [dict(r) for r in records]


def budget_of(spec: RunSpec) -> Budget:
    return Budget(spec.privacy.epsilon, spec.privacy.delta, spec.privacy.accountant)


def check_budget(ledger: PrivacyLedger, spec: RunSpec) -> float:
    """ε of the ledger; raises if it exceeds the spec's budget (tolerance 1e-9). The pool
    checks each release before computing it; this is the check of the whole ledger."""
    return budget_of(spec).check(ledger.releases)


def quarantine(run_dir: Path) -> Path:
    """Move a failed run's directory (checkpoint, secret seed, release log, the method's
    scratch) to ``<runs root>/.quarantine/<run key>.<UTC time>-<random>``, out of reach of
    the next run of its spec, which starts afresh; kept for the operator to inspect."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target = run_dir.parent / QUARANTINE / f"{run_dir.name}.{stamp}-{secrets.token_hex(4)}"
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(run_dir, target)
    return target


@contextlib.contextmanager
def _quarantined_on_failure(run_dir: Path) -> Iterator[None]:
    """Quarantine the run directory if the block raises an error (an ``Exception``); a
    :class:`RunInterrupted` (a simulated kill) or an operator's interrupt leaves it to
    resume."""
    try:
        yield
    except RunInterrupted:
        raise
    except Exception as exc:
        if run_dir.exists():
            exc.add_note(f"the run failed; its state is quarantined in {quarantine(run_dir)}")
        raise


def _check_replayed(pool: ClientPool) -> None:
    """Refuse to go on while the resumed method has not repeated every call it was
    delivered before the interruption: the pool would otherwise reuse their release
    indices (and noise)."""
    if pool.replays_pending():
        raise PrivacyError(
            f"the resumed method did not repeat {pool.replays_pending()} call(s) it was "
            "delivered before the run was interrupted; a resumed run must make the same "
            "calls in the same order"
        )


def pool_seed(spec: RunSpec, run_dir: Path) -> int:
    """Seed of the pool's private randomness (noise, sampling, cohorts): the spec's seed when
    ``privacy.noise_seed`` is ``spec``; otherwise a secret 128-bit seed drawn once per run and
    kept in the run directory (private state, like the checkpoint), so a resumed run draws
    the same noise and no published record can regenerate it."""
    if spec.privacy.noise_seed == "spec":
        return spec.seed
    path = run_dir / POOL_SEED
    if not path.exists():
        atomic_write(path, str(secrets.randbits(128)))
    return int(path.read_text())


def resume_checkpoint(path: Path | BinaryIO, run_key: str) -> dict[str, Any]:
    """The checkpoint of run ``run_key`` at ``path``, refused if it needs code to load or
    was written for another run (a file copied or planted from elsewhere)."""
    try:
        saved = load_checkpoint(path)
    except UnsafeCheckpointError as exc:
        raise UnsafeCheckpointError(
            f"{path}: refused: {exc}; delete it to start the run over"
        ) from exc
    if not isinstance(saved, dict) or saved.get("run_key") != run_key:
        raise UnsafeCheckpointError(
            f"{path}: refused: it is not a checkpoint of run {run_key}; delete it to start over"
        )
    missing = [k for k in CHECKPOINT_KEYS if k not in saved]
    if missing:
        raise UnsafeCheckpointError(f"{path}: refused: it lacks {missing}; delete it to start over")
    return saved


def _save_checkpoint(run_dir: Path, payload: dict[str, Any], round_index: int) -> None:
    """Write the checkpoint atomically once it is known to load back safely, so a method
    state that only code could rebuild fails now, in the round that made it."""
    tmp = run_dir / (CHECKPOINT + ".tmp")
    save_checked(payload, tmp, f"method state after round {round_index}")
    os.replace(tmp, run_dir / CHECKPOINT)


class InProcessMethod:
    """The method run in this process (tests of method internals; ``isolated=False``)."""

    def __init__(self, method: Method, ctx: MethodContext, seed: int) -> None:
        self.method, self.ctx, self.seed = method, ctx, seed
        self.state: Any = None

    def num_rounds(self) -> int:
        return self.method.num_rounds()

    def cache_requests(self) -> list[dict[str, Any]]:
        return self.method.cache_requests(self.ctx)

    def pool_seconds(self) -> float:
        """Seconds spent in client code so far (the pool's count, not published)."""
        return self.ctx.pool.costs.client_seconds

    def open_on_schedule(self) -> set[str]:
        return {"everything (one process: no schedule)"}  # tests only: never published

    def setup(self) -> Any:
        seed_torch(self.seed, -1)
        self.state = self.method.setup(self.ctx)
        return self.state

    def resume(self, state: Any) -> None:
        self.state = state

    def round(self, r: int) -> Any:
        seed_torch(self.seed, r)
        self.state = self.method.round(self.ctx, self.state, r)
        return self.state

    def finish(self) -> Any:
        seed_torch(self.seed, self.method.num_rounds())
        return self.method.finish(self.ctx, self.state)

    def at_checkpoint(self, save: Callable[[], None]) -> None:
        save()

    def flush_checkpoint(self) -> None:
        pass

    def close(self) -> None:
        pass


def run(
    spec: RunSpec,
    *,
    runs_root: Path = Path("runs"),
    stop_after_round: int | None = None,
    profile: Any = None,
    split: FederatedSplit | None = None,
    isolated: bool = False,
    plugin: Path | None = None,
    client_actors: int = 0,
) -> RunResult:
    """Run (or resume) ``spec``; returns its result record and artifact.

    ``profile`` and ``split`` may be passed in when the caller already holds them (the
    quickstart, tests); otherwise they are loaded from the spec. With ``isolated`` the
    method runs in its own sandboxed process and its client code in a client worker
    (:mod:`benchmark.isolation`); ``fedsynth run``, ``submit`` and the suites use that.
    ``plugin`` is a submitted adapter file, loaded only in the method's processes.
    ``client_actors`` > 0 (isolated only) spreads the client shards over that many Ray
    actors (:mod:`benchmark.isolation.client_shards`); the record does not change.
    """
    split = split or load_run_split(spec)
    units = privacy_units(split, spec.privacy.unit)
    check_delta(spec, len(units))
    if isolated:
        from benchmark.isolation.coordinator import IsolatedLaunch

        launch = IsolatedLaunch(spec, split, profile, plugin, client_actors)
        resolved, role = launch.resolve()
        declared, source = launch.post_processing, launch
    else:
        resolved, method_cls = resolve(spec, split)
        role = method_cls.role
        declared, source = method_cls.post_processing, method_cls
    post_processing = check_post_processing(
        declared, resolved.method_config, f"{spec.method.name}.post_processing"
    )
    run_dir = path_under(runs_root, resolved.run_key, where="run key")
    if profile is None:
        from benchmark.profiles import new_profile

        profile = new_profile(spec.profile)
    bind_public(profile, split.texts("public"))
    models = profile.describe()
    rounds = rounds_key(resolved, post_processing, models) if post_processing else None
    result = _finished(run_dir, resolved.run_key, models)
    if result is None:
        with _held(run_dir, resolved.run_key), _quarantined_on_failure(run_dir):
            # Another process may have finished it between the check above and the lock.
            result = _finished(run_dir, resolved.run_key, models)
            if result is None:
                drop_unmarked_fork(run_dir)  # whatever this attempt's method declares
                if rounds is not None:
                    secret = spec.privacy.noise_seed != "spec"
                    fork_rounds(runs_root, run_dir, resolved.run_key, rounds, secret)
                held = HeldRun(spec, resolved, split, profile, run_dir, role, rounds is not None)
                result = _run_held(held, units, source, stop_after_round)
    if rounds is not None and rounds_from(run_dir) is None and (run_dir / CHECKPOINT).exists():
        register_donor(runs_root, rounds, resolved.run_key)  # outside the quarantine
    return result


@dataclass(frozen=True)
class HeldRun:
    """An unfinished run whose directory this process holds. ``shares_rounds``: its method
    declares post-processing keys, so its record names the rounds it was made from
    (:mod:`benchmark.shared_rounds`)."""

    spec: RunSpec
    resolved: ResolvedSpec
    split: FederatedSplit
    profile: Any
    run_dir: Path
    role: str
    shares_rounds: bool


def _run_held(
    held: HeldRun,
    units: dict[str, list[dict[str, Any]]],
    source: Any,
    stop_after_round: int | None,
) -> RunResult:
    """Start or resume ``held``, finish it and evaluate it: its pool and its method, from
    ``source`` (an ``IsolatedLaunch``, run sandboxed, or the method's class, run here).
    A fork (:func:`fork_rounds`) gets a sealed pool and no client code."""
    spec, resolved, split, profile, run_dir = (
        held.spec, held.resolved, held.split, held.profile, held.run_dir
    )  # fmt: skip
    isolated = not isinstance(source, type)
    forked = rounds_from(run_dir)
    (run_dir / "spec.json").write_text(json.dumps(resolved.to_dict(), indent=1))

    private = not math.isinf(spec.privacy.epsilon)
    ledger = PrivacyLedger(guard=budget_of(spec).check if private else None)
    work_dir = run_dir / "work"
    work_dir.mkdir(exist_ok=True)
    seed = pool_seed(spec, run_dir)
    canaries = canary_plan(spec, units, seed)
    if canaries is not None:
        units = audited_units(units, canaries)
    clients = None  # client code in this process (tests)
    if forked:  # none at all: the release post-processes another run's rounds
        clients = NoClients()
    elif isolated:
        clients = source.client_worker(units, run_dir)
    pool = ClientPool(
        units,
        ledger=ledger,
        seed=seed,
        unit=spec.privacy.unit,
        allow_nonprivate=math.isinf(spec.privacy.epsilon),
        simulated=spec.privacy.guarantee == "simulated",
        independence_checks=INDEPENDENCE_CHECKS,  # every run, `guarantee: simulated` too
        executor=clients,
        local_trainer=LocalLMTrainer(lambda: profile.conditional_lm()),
        preference_policy=lambda: profile.preference_policy(),
        release_log=ReleaseLog(run_dir / RELEASES) if private else None,
    )
    if forked:  # another run's seed and release counter: no call, before any (and resume)
        pool.seal("this run post-processes another run's private rounds")
    ctx = MethodContext(
        pool=pool,
        public=own_copy(split.records("public")),
        validation=own_copy(split.records("validation")),
        profile=profile,
        privacy=spec.privacy,
        seed=spec.seed,
        work_dir=work_dir,
        diagnostics=Diagnostics(run_dir),
    )
    try:
        if isolated:
            source.warm(evaluation_start(ctx, "public"))
            method: Any = source.method(resolved, pool, run_dir)
        else:
            method = InProcessMethod(source(resolved.method_config), ctx, spec.seed)
        try:
            return _drive(method, held, pool, ctx, stop_after_round, canaries, forked)
        finally:
            method.close()
    finally:
        if isolated:  # also where the method process failed to start
            source.close()


def fork_rounds(runs_root: Path, run_dir: Path, run_key: str, rounds: str, secret: bool) -> None:
    """Start the new run ``run_key`` in ``run_dir`` from the last round of the finished run
    that holds the rounds ``rounds`` (:mod:`benchmark.shared_rounds`): that run's checkpoint,
    under this run's key, and its secret noise seed (when the noise is ``secret``).

    Only a run directory no method has started in (no ``work/``) is forked: a killed run's
    method process may have kept deliveries in its scratch, so it resumes its own rounds.
    The marker (:data:`ROUNDS_FROM`) is written last, so a fork interrupted before it left
    files of no run, which are dropped and the fork is made again. A donor that cannot be
    read is no donor: the run runs its own rounds."""
    if not _unstarted(run_dir):
        return  # forked before, or its own rounds began
    donor = donor_of(runs_root, rounds)
    if donor is None or donor == run_key:
        return
    donor_dir = path_under(runs_root, donor, where="rounds donor")
    try:
        if not (donor_dir / RESULT).exists() or (donor_dir / ROUNDS_FROM).exists():
            return  # unfinished, or a fork itself: only a run's own rounds are shared
        if (donor_dir / PUBLICATION_REFUSED).exists():
            return  # its audit refuted its ε: no post-processing of it is published either
        blob = (donor_dir / CHECKPOINT).read_bytes()
        saved = resume_checkpoint(io.BytesIO(blob), donor)
        seed = (donor_dir / POOL_SEED).read_text() if secret else None
    except (OSError, UnsafeCheckpointError):
        return
    if seed is not None:
        atomic_write(run_dir / POOL_SEED, seed)
    pool = {**saved["pool"], "memos": None}  # the clients' memos: a fork runs no client code
    _save_checkpoint(run_dir, {**saved, "run_key": run_key, "pool": pool}, saved["next_round"] - 1)
    made_from = rounds_identity(donor, hashlib.sha256(blob).hexdigest())
    atomic_write(run_dir / ROUNDS_FROM, json.dumps(made_from))


def drop_unmarked_fork(run_dir: Path) -> None:
    """Drop what a fork interrupted before its marker left (a donor's checkpoint and secret
    seed in a directory no method started in): resumed without the marker, the pool would
    not be sealed and would redraw the donor's noise. A run's own checkpoint or seed
    always has ``work/`` beside it."""
    if _unstarted(run_dir):
        for name in (CHECKPOINT, POOL_SEED):
            (run_dir / name).unlink(missing_ok=True)


def _unstarted(run_dir: Path) -> bool:
    """No method has started in ``run_dir`` (no ``work/``) and it is not a fork."""
    return not (run_dir / ROUNDS_FROM).exists() and not (run_dir / "work").exists()


def rounds_from(run_dir: Path) -> dict[str, str] | None:
    """The rounds a fork in ``run_dir`` post-processed (:func:`rounds_identity`), if it is one."""
    path = run_dir / ROUNDS_FROM
    return json.loads(path.read_text()) if path.exists() else None


@contextlib.contextmanager
def _held(run_dir: Path, run_key: str) -> Iterator[None]:
    """Hold the run directory's lock for the block; a lock another process holds is
    :class:`RunBusy` (only taking the lock: nothing raised inside the block is relabelled)."""
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(exclusive_lock(run_dir / LOCK))
        except Busy as exc:
            raise RunBusy(f"run {run_key} is running in another process") from exc
        yield


def run_key_of(spec: RunSpec, split: FederatedSplit, plugin: Path | None = None) -> str:
    """The run key ``spec`` resolves to (the method is only described, in a sandboxed
    process: its defaults are part of the key)."""
    from benchmark.isolation.coordinator import IsolatedLaunch

    resolved, _ = IsolatedLaunch(spec, split, None, plugin).resolve()
    return resolved.run_key


def finished_result(
    spec: RunSpec, *, runs_root: Path, split: FederatedSplit, plugin: Path | None = None
) -> RunResult | None:
    """The result of ``spec`` if a run under ``runs_root`` finished it; runs nothing (the
    method is only described, in a sandboxed process, for its run key)."""
    from benchmark.profiles import new_profile

    run_key = run_key_of(spec, split, plugin)
    models = new_profile(spec.profile).describe()
    return _finished(path_under(runs_root, run_key, where="run key"), run_key, models)


def _finished(run_dir: Path, run_key: str, models: dict[str, Any]) -> RunResult | None:
    """The finished run in ``run_dir``, if any, when it used the profile's ``models``."""
    if not (run_dir / RESULT).exists():
        return None
    record = json.loads((run_dir / RESULT).read_text())
    check_same_models(record, models, str(run_dir))
    return RunResult(run_key, run_dir, record, Artifact.load(run_dir / ARTIFACT))


def _drive(
    method: Any,
    held: HeldRun,
    pool: ClientPool,
    ctx: MethodContext,
    stop_after_round: int | None,
    canaries: CanaryPlan | None,
    forked: dict[str, str] | None,
) -> RunResult:
    """Rounds, checkpoints, the release, the budget check, evaluation and the record.
    ``forked``: the rounds this run post-processes, when it is a fork."""
    spec, resolved, split, run_dir = held.spec, held.resolved, held.split, held.run_dir
    ledger = pool.ledger
    build_requested(method.cache_requests(), lambda: ctx.profile.preference_generator())
    checkpoint_path = run_dir / CHECKPOINT
    if checkpoint_path.exists():
        saved = resume_checkpoint(checkpoint_path, resolved.run_key)
        start, elapsed = saved["next_round"], saved["elapsed"]
        pool.load_state_dict(saved["pool"])
        ledger.releases[:] = PrivacyLedger.from_json(saved["ledger"]).releases
        pool.open_release_log()  # charges what was delivered since the checkpoint
        method.resume(saved["method_state"])
    elif forked:
        raise PrivacyError(f"{run_dir}: a fork of another run's rounds without its checkpoint")
    else:
        start, elapsed = 0, 0.0
        pool.open_release_log()  # a run killed before its first checkpoint delivered some
        method.setup()

    began, served = time.perf_counter(), method.pool_seconds()
    memo_seconds = 0.0  # spent fetching and writing the clients' memos for the checkpoints

    def own_seconds() -> float:
        """The method's own time: wall time less the time spent serving its pool calls and
        fetching and writing the checkpoints, which hold the clients' memos (client code
        decides how long those take, so they are not published)."""
        clients = method.pool_seconds() - served + memo_seconds
        return max(elapsed + time.perf_counter() - began - clients, 0.0)

    def checkpointing(step: Callable[[], Any]) -> Any:
        """Run a checkpoint step outside a pool call's slot, its time counted as the
        memos' (a save inside a slot is already the slot's, served time)."""
        nonlocal memo_seconds
        asked = time.perf_counter()
        try:
            return step()
        finally:
            memo_seconds += time.perf_counter() - asked

    rounds = range(start, method.num_rounds())
    if forked is not None and start != method.num_rounds():
        raise PrivacyError(
            f"{spec.method.name}: the run it post-processes stopped after {start} rounds, this "
            f"one has {method.num_rounds()}: a declared post-processing key changes the rounds"
        )
    for r in progress(rounds, f"{spec.method.name} rounds", total=len(rounds), unit="round"):
        state = method.round(r)
        check_budget(ledger, spec)
        _check_replayed(pool)
        pool_state = checkpointing(pool.state_dict)  # fetches the clients' memos
        payload = {
            "run_key": resolved.run_key,
            "next_round": r + 1,
            "method_state": state,
            "pool": pool_state,
            "ledger": ledger.to_json(),
            "elapsed": own_seconds(),
        }

        def save(payload: dict[str, Any] = payload, r: int = r) -> None:
            _save_checkpoint(run_dir, payload, r)
            pool.prune_release_log()

        checkpointing(lambda: method.at_checkpoint(save))  # now, or in a later slot
        if stop_after_round is not None and r + 1 >= stop_after_round:
            method.flush_checkpoint()
            raise RunInterrupted(f"stopped after round {r + 1} (checkpoint in {run_dir})")

    artifact = checked_artifact(method.finish(), spec.method.name)
    # the method process has answered, so its clock tells nothing; the record's would
    checkpointing(method.flush_checkpoint)
    _check_replayed(pool)
    epsilon = check_budget(ledger, spec)
    artifact.save(run_dir / ARTIFACT)
    method_seconds = own_seconds()

    verbatim = check_release(artifact, split, spec.privacy.epsilon)
    refused = verbatim is not None and verbatim.refused
    start = evaluation_start(ctx, downstream_config(spec).start)
    report = (
        {"metrics": {}, "settings": {}, "skipped": {}}  # a refused release is not scored
        if refused
        else evaluate_artifact(
            artifact, spec, split, ctx.profile, run_dir, pool.costs.summary(), start, canaries
        )
    )
    record = build_record(
        resolved=resolved,
        split=split,
        epsilon=epsilon,
        ledger=ledger,
        metrics=flatten_metrics(report),
        evaluation=report,
        costs=pool.costs.summary(),
        wall_seconds=method_seconds,
        profile=ctx.profile,
        role=held.role,
        release_kind=artifact.kind,
        instrument={}
        if refused
        else instrument_section([m["name"] for m in spec.evaluation.metrics], start),
        verbatim=None if verbatim is None else verbatim.to_record(),
        open_on_schedule=method.open_on_schedule()
        if spec.privacy.call_seconds is not None
        else None,
    )
    if forked is not None:  # the rounds the release was made from: a donor's, or its own
        record["rounds"] = forked
    elif held.shares_rounds and (run_dir / CHECKPOINT).exists():  # its size is client code's
        record["rounds"] = rounds_identity(resolved.run_key, sha256_file(run_dir / CHECKPOINT))
    if refused:
        write_record(record, run_dir / REFUSED)
        raise ReleaseRefused(
            f"release refused: {verbatim.matched} of {verbatim.released} released texts copy "
            f"private texts (train {verbatim.train}, validation {verbatim.validation}, test "
            f"{verbatim.test}); at most {verbatim.allowed} match at the public part's natural "
            f"rate; record: {run_dir / REFUSED}"
        )
    write_record(record, run_dir / RESULT)
    return RunResult(resolved.run_key, run_dir, record, artifact)


def checked_artifact(artifact: Any, method_name: str) -> Artifact:
    """The release as the evaluator will read it, validated again: a method may change an
    artifact's fields after constructing it."""
    if not isinstance(artifact, Artifact):
        raise ArtifactError(
            f"artifact: {method_name}.finish returned {type(artifact).__name__}, not an Artifact"
        )
    artifact.validate()
    return artifact


def evaluate_artifact(
    artifact: Artifact,
    spec: RunSpec,
    split: FederatedSplit,
    profile: Any,
    run_dir: Path,
    costs: dict[str, float],
    start_model: Any = None,
    canaries: CanaryPlan | None = None,
) -> dict[str, Any]:
    """Evaluate the artifact; returns the evaluator's full report (metrics by label)."""
    if not spec.evaluation.metrics:
        return {"metrics": {}, "settings": {}, "skipped": {}}
    from benchmark.evaluation.base import EvalContext, evaluate

    eval_dir = run_dir / "eval"
    eval_dir.mkdir(exist_ok=True)
    seed_torch(spec.seed, -2)
    ctx = EvalContext(
        split=split,
        profile=profile,
        seed=spec.seed,
        work_dir=eval_dir,
        costs=costs,
        downstream=downstream_config(spec),
        start_model=start_model,
        canaries=canaries,
    )
    metric_specs = [{"name": m["name"], **m["settings"]} for m in spec.evaluation.metrics]
    return evaluate(artifact, ctx, metric_specs)


def evaluation_start(ctx: MethodContext, start: str) -> Any:
    """What the evaluator fine-tunes releases from: the public start, or (``generic``, paper
    000's protocol) the profile's on-device LM without the public fine-tuning."""
    from benchmark.training import PUBLIC_START_CONFIGS, public_start

    config = PUBLIC_START_CONFIGS[ctx.profile.name]
    if start == "generic":
        config = {**config, "public_epochs": 0}
    return lambda: public_start(ctx, config)


def downstream_config(spec: RunSpec) -> Any:
    from benchmark.evaluation.downstream import DownstreamConfig

    try:
        return DownstreamConfig(**spec.evaluation.downstream)
    except (TypeError, ValueError) as exc:
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
