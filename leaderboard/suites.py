"""A suite: the same split, budgets, seeds and evaluation for every method ranked, and how
its grid runs into a results store.

The named suites are data (``leaderboard/suite_defs/*.yaml``, loaded by
:mod:`leaderboard.suite_files`, looked up in :mod:`leaderboard.catalog`). A third-party
adapter submitted with ``fedsynth submit`` is run through a suite exactly like the built-ins.
"""

from __future__ import annotations

import functools
import json
import logging
import math
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmark.data import FederatedSplit
from benchmark.files import atomic_write
from benchmark.profiles import FAMILIES
from benchmark.records import PUBLICATION_REFUSED
from benchmark.spec import RunSpec, spec_from_dict
from leaderboard.entries import (
    PublicationRefused,
    build_entry,
    content_digest,
    entry_key,
    publication_refusal,
    schedule_refusal,
    version_definition,
)
from leaderboard.executors import Executor, Job, LocalExecutor, cached_split, run_job
from leaderboard.schema import EntryError
from leaderboard.signing import accepted_keys, host_key, sign_entry, verified_body
from leaderboard.store import (
    VERSION_FILE,
    record_path,
    stored_records,
    superseded_entries,
    write_entry,
    write_manifest,
    write_record,
    write_version,
)
from leaderboard.store_index import INDEX_FILE, read_index, update_index

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

_log = logging.getLogger(__name__)

# Budgets fixed by what the row is: the ε = 0 / ε = ∞ bounds and the (non-private) control.
FIXED_EPSILONS = {
    "public_only": 0.0,
    "base_model": 0.0,
    "nonprivate": math.inf,
    "oracle": math.inf,
    "generator_only": 0.0,
}


@dataclass(frozen=True)
class SuiteDefinition:
    """Which file, at which version and content, a suite was loaded from."""

    file: str
    version: int
    sha256: str

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "version": self.version, "sha256": self.sha256}


@dataclass(frozen=True)
class Variant:
    """A named row of a paper's table: ``method`` under its own ``params`` at one budget.
    A paper's table has several rows of one method at one ε (paper 001's ε = 8 with and
    without refinement), so the row's name goes into its entries (``variant``) and keeps
    them apart in the store and the tables."""

    method: str
    epsilon: float
    params: dict[str, Any] = field(default_factory=dict)
    description: str = ""
    # "control": a row shown beside the methods and never ranked (no private data, or no
    # noise: paper 001's Pre., the bench's noise-free ceilings).
    role: str = "method"


@dataclass(frozen=True)
class Suite:
    name: str
    source: str
    split_options: dict[str, Any]
    profile: str
    epsilons: tuple[float, ...]
    delta: float
    seeds: tuple[int, ...]
    metrics: tuple[dict[str, Any], ...]
    methods: tuple[str, ...]
    method_params: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Parameters selected on validation for one (method, ε) (:mod:`leaderboard.tuning`),
    # over ``method_params``. Each selection is its signed report's under
    # ``results/<version>/<split>/_tuning/``; tests/test_published_results.py holds them equal.
    selected_params: dict[str, dict[float, dict[str, Any]]] = field(default_factory=dict)
    downstream: dict[str, Any] = field(default_factory=dict)
    # Fewer seeds at some budgets (paper 000's ε grid: 3 seeds at ε = 1, 1 at ε = 7).
    seeds_by_epsilon: dict[float, tuple[int, ...]] = field(default_factory=dict)
    # Privacy fields set per method beyond ε and δ: a method whose paper defines another
    # privacy unit (fed_ctg: client_sample) runs under it, and its entry says so.
    method_privacy: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The declared tuning budget: each tuned method's candidate grid on validation
    # (`fedsynth suite tune` runs it when no --grid is given).
    tuning: dict[str, dict[str, list[Any]]] = field(default_factory=dict)
    # A paper's named rows (``methods`` lists their names, in the table's order).
    variants: dict[str, Variant] = field(default_factory=dict)
    # Trusted set-up on the built split before any (sandboxed) run, e.g. a cache the
    # method processes may read but not write.
    prepare: Callable[[Path], None] | None = None
    # Named paired differences of two rows (minuend, subtrahend), reported under the table.
    contrasts: dict[str, tuple[str, str]] = field(default_factory=dict)
    # The file, version and digest the suite was loaded from (leaderboard/suite_files.py).
    definition: SuiteDefinition | None = None
    # What the run takes, as measured (printed before a quickstart starts).
    expected_duration: str = ""

    def budgets(self, method: str) -> tuple[float, ...]:
        if method in self.variants:
            return (self.variants[method].epsilon,)
        return (FIXED_EPSILONS[method],) if method in FIXED_EPSILONS else self.epsilons

    def method_of(self, row: str) -> str:
        """The registered method a row runs (a variant's, else the row's own name)."""
        return self.variants[row].method if row in self.variants else row

    def seeds_for(self, epsilon: float) -> tuple[int, ...]:
        return self.seeds_by_epsilon.get(epsilon, self.seeds)

    def grid(self, methods: Sequence[str] | None = None) -> list[tuple[str, float, int]]:
        """Every (method, ε, seed) run of the suite, in run order."""
        return [
            (method, eps, seed)
            for method in methods or self.methods
            for eps in self.budgets(method)
            for seed in self.seeds_for(eps)
        ]

    def spec(
        self,
        method: str,
        epsilon: float,
        seed: int,
        split_path: Path,
        params: dict[str, Any] | None = None,
    ) -> RunSpec:
        """The run spec of one grid cell; ``params`` override the suite's method parameters
        and its selections (a tuning candidate, :mod:`leaderboard.tuning`); ``method`` may
        name a variant row, whose parameters come between the method's and those."""
        name = self.method_of(method)
        variant = self.variants[method].params if method in self.variants else {}
        selected = self.selected_params.get(method, {}).get(epsilon, {})
        method_params = {
            **self.method_params.get(name, {}), **variant, **selected, **(params or {})
        }  # fmt: skip
        return spec_from_dict(
            {
                "split": {"path": str(split_path)},
                "method": {"name": name, "params": method_params},
                "privacy": {
                    "epsilon": epsilon,
                    "delta": self.delta,
                    **self.method_privacy.get(name, {}),
                },
                "evaluation": {"metrics": list(self.metrics), "downstream": self.downstream},
                "seed": seed,
                "profile": self.profile,
            }
        )


def on_schedule(suite: Suite, methods: Sequence[str], call_seconds: float) -> Suite:
    """``suite`` with the pool calls of ``methods`` answered on the public schedule
    ``call_seconds`` (``privacy.call_seconds``): how a method that is not built in runs."""
    privacy = dict(suite.method_privacy)
    for name in methods:
        privacy[name] = {**privacy.get(name, {}), "call_seconds": call_seconds}
    return replace(suite, method_privacy=privacy)


def with_profile(suite: Suite, profile: str | None) -> Suite:
    """``suite`` on ``profile`` in place of its own (None: unchanged): the same split,
    budgets, seeds and metrics; the methods take that profile's configs, and the entries
    are of another leaderboard version (the instrument is part of it)."""
    return suite if profile is None else replace(suite, profile=profile)


# The preference policy is the preference track's instrument where a profile names its own
# (paper: Pythia-2.8B); in tiny and cpu it is the generator and not described apart.
INSTRUMENT_KEYS = (
    "ondevice_lm",
    "ondevice_tokenizer",
    "ondevice_corpus",
    "embedder",
    "preference_policy",
)


def instrument(profile: str) -> dict[str, str]:
    """The parts of a profile that measure every release (not the methods' own models)."""
    from benchmark.profiles import get_profile

    described = get_profile(profile).describe()
    return {k: described[k] for k in INSTRUMENT_KEYS if k in described}


def ensure_split(suite: Suite, splits_root: Path) -> Path:
    """Build the suite's split once (deterministic: same options, same hash), and again when
    the suite's split options changed since (a new version of the suite file): a split built
    under other options is never reused."""
    from benchmark.registry import DATASETS
    from benchmark.split_storage import is_complete
    from datasets_builders.pipeline import build_split, built_with, options_for

    out = splits_root / f"{suite.source}-{suite.name}"
    source = DATASETS.get(suite.source)()
    options = options_for(source, suite.split_options)
    if not built_with(out, source, options):
        build_split(source, options, out, overwrite=is_complete(out))
    return out


def signed_records(
    results_root: Path, lb_version: str, split_name: str, keys: dict[str, Ed25519PublicKey]
) -> dict[str, Any]:
    """The run records the store keeps for this version and split, by run key, each checked
    against ``keys`` and against the store's signed index, when it has one (a record edited
    in the store stops the suite, whoever re-signed it), and returned without its
    signature, as the run wrote it."""
    indexed = (results_root / INDEX_FILE).exists()
    listed = read_index(results_root, keys).files if indexed else {}
    records = {}
    for signed in stored_records(results_root, lb_version, split_name):
        body = verified_body(signed, keys)
        path = record_path(results_root, lb_version, split_name, body["run_key"])
        name = path.relative_to(results_root).as_posix()
        if indexed and listed.get(name) != content_digest(body):
            raise EntryError(f"kept record {name}: not as the store's signed index lists it")
        records[body["run_key"]] = body
    return records


@dataclass(frozen=True)
class SuiteStore:
    """A suite's split and leaderboard version in one results store: where its runs' records
    go, signed with ``key``, the records the store already keeps (by run key), and the
    cells refused publication so far (entry key → why)."""

    results_root: Path
    key: Ed25519PrivateKey  # the host's signing key
    keys: dict[str, Ed25519PublicKey]  # whose signatures count: the repository's and the host's
    split_path: Path
    split_name: str
    lb_version: str
    stored: dict[str, Any]
    refused: dict[str, str] = field(default_factory=dict)


def suite_version(suite: Suite, split_hash: str) -> dict[str, Any]:
    """The definition of the leaderboard version ``suite``'s entries on its split go to."""
    variant = suite.profile if suite.profile in FAMILIES else None
    return version_definition(
        [split_hash], suite.metrics, suite.downstream, instrument(suite.profile), variant
    )


def open_store(suite: Suite, results_root: Path, splits_root: Path) -> SuiteStore:
    """Build the suite's split if needed, write its version and manifest into the store and
    read the store's kept records."""
    key = host_key(results_root)  # before hours of runs: a misplaced key fails now
    split_path = ensure_split(suite, splits_root)
    if suite.prepare is not None:
        suite.prepare(split_path)
    split: FederatedSplit = cached_split(str(split_path))
    lb_version = write_version(results_root, suite_version(suite, split.content_hash))
    manifest = write_manifest(results_root, lb_version, split.name, split.manifest)
    keys, _ = accepted_keys(results_root, trust_host=True)
    # indexed as written: an edit to either (which version a track shows, what its split
    # is said to be) is then detected
    update_index(results_root, key, keys, [results_root / lb_version / VERSION_FILE, manifest])
    stored = signed_records(results_root, lb_version, split.name, keys)
    return SuiteStore(results_root, key, keys, split_path, split.name, lb_version, stored)


def run_jobs(
    store: SuiteStore,
    jobs: Sequence[Job],
    *,
    runs_root: Path,
    plugin: Path | None = None,
    finished_only: bool = False,
    executor: Executor | None = None,
    client_actors: int = 0,
) -> Iterator[tuple[Job, str, dict[str, Any]]]:
    """(job, run key, record) of every job that finished, in any order: a run the store keeps
    is not repeated, and every new run's record is kept, signed, in the store and its
    signed index. A run whose canary audit refutes its ε is neither kept nor yielded: its
    cell goes into ``store.refused`` and the reason into its run directory."""
    runner = LocalExecutor() if finished_only or executor is None else executor
    work = functools.partial(
        run_job, runs_root=runs_root, split_path=store.split_path, plugin=plugin,
        finished_only=finished_only, stored=store.stored, client_actors=client_actors,
    )  # fmt: skip
    for job, outcome in runner.outcomes(jobs, work):
        if outcome is None:
            continue
        run_key, record = outcome
        if run_key not in store.stored:
            refuted = publication_refusal(record)
            if refuted:
                refuse(store, entry_key(run_key, job.spec.seed), f"{run_key}: {refuted}")
                atomic_write(
                    runs_root / run_key / PUBLICATION_REFUSED, json.dumps({"reason": refuted})
                )
                continue
            signed = sign_entry(record, store.key)
            path = write_record(store.results_root, store.lb_version, store.split_name, signed)
            update_index(store.results_root, store.key, store.keys, written=[path])
        yield job, run_key, record


def refuse(store: SuiteStore, cell: str, reason: str) -> None:
    """Keep ``cell`` (an entry key) from publication, and say why in the log."""
    _log.error("not published: %s", reason)
    store.refused.setdefault(cell, reason)


def check_refusals(store: SuiteStore) -> None:
    """Raise :class:`PublicationRefused` naming every refused cell, if any."""
    if store.refused:
        raise PublicationRefused("not signed or published: " + "; ".join(store.refused.values()))


def check_schedules(suite: Suite, methods: Sequence[str] | None = None) -> None:
    """Refuse (:class:`PublicationRefused`), before any split is built or run made, a grid
    with a method that is not the operator's own code and runs off the public schedule:
    none of its records could be published (:func:`~leaderboard.entries.schedule_refusal`)."""
    for name in sorted({suite.method_of(row) for row, _, _ in suite.grid(methods)}):
        call_seconds = suite.method_privacy.get(name, {}).get("call_seconds")
        off_schedule = schedule_refusal(name, call_seconds)
        if off_schedule:
            raise PublicationRefused(off_schedule)


def run_suite(
    suite: Suite,
    *,
    methods: Sequence[str] | None = None,
    results_root: Path,
    runs_root: Path,
    splits_root: Path,
    on_run: Callable[[str], None] | None = None,
    plugin: Path | None = None,
    finished_only: bool = False,
    executor: Executor | None = None,
    client_actors: int = 0,
) -> list[dict[str, Any]]:
    """Run every (method, ε, seed) of the suite on the isolated path; write and return one
    entry per (method, ε), signed with the host's key (leaderboard/signing.py).

    ``on_run`` is called with a label after each finished run (progress reporting);
    ``plugin`` is a submitted adapter file (loaded only in the method's processes). With
    ``finished_only`` nothing is run: entries are written from the runs already finished
    (a long grid's rows as they complete, with the seeds they have so far). ``executor``
    runs the grid (default: one run after another here; :mod:`leaderboard.executors`);
    ``client_actors`` > 0 spreads each run's clients over that many Ray actors. An entry
    replaces the entries of its cell written with other parameters (the old runs' records
    stay in the store). A cell any of whose runs the canary audit refutes is not
    published (no seed is silently dropped from it): the others are, then
    :class:`PublicationRefused` names it.
    """
    check_schedules(suite, methods)
    store = open_store(suite, results_root, splits_root)
    jobs = [
        Job(f"{row} ε={eps:g} seed={seed}", suite.spec(row, eps, seed, store.split_path), row)
        for row, eps, seed in suite.grid(methods)
    ]
    grouped: dict[str, list[dict[str, Any]]] = defaultdict(list)
    variant_of: dict[str, str | None] = {}
    for job, run_key, record in run_jobs(
        store, jobs, runs_root=runs_root, plugin=plugin, finished_only=finished_only,
        executor=executor, client_actors=client_actors,
    ):  # fmt: skip
        cell = entry_key(run_key, job.spec.seed)
        grouped[cell].append(record)
        variant_of[cell] = job.row if job.row in suite.variants else None
        if on_run:
            on_run(job.label)
    entries = []
    for cell, records in grouped.items():
        if cell not in store.refused:
            try:
                variant = variant_of[cell]
                control = variant is not None and suite.variants[variant].role == "control"
                entry = build_entry(records, store.lb_version, variant, control)
                entries.append(sign_entry(entry, store.key))
            except PublicationRefused as exc:
                refuse(store, cell, str(exc))
    written, removed = [], []
    for entry in entries:
        written.append(write_entry(results_root, entry))
        for old in superseded_entries(results_root, entry):
            _log.warning("%s replaces %s (the cell's parameters changed)", entry["entry_key"], old)
            old.unlink()
            removed.append(old)
    if written:
        update_index(results_root, store.key, store.keys, written, removed)
    check_refusals(store)
    return entries
