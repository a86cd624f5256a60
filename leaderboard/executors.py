"""Where a suite's runs execute: one after another in this process (``local``, the default)
or as Ray tasks on a cluster or a local head (``ray``, the ``cluster`` extra).

Each run is independent and resumable (its state is its run directory), so an executor
calls the suite's work function (:func:`run_job` with the suite's paths bound) once per
(method, ε, seed), or again for a run another process held, and hands back the records.
The suite builds and signs the entries in the calling process, the only one that reads the
host key. A run is the same code on either executor, so with ``privacy.noise_seed: spec``
the records are identical (tested); with a secret seed each run draws its own noise either
way.

Ray specifics: a task per run, with the resources its profile needs (one CPU; on ``paper``
one GPU as well); a run another process holds fails its task and stops the grid (only local
workers share a grid); the workers must see the same paths as the caller (runs, splits,
caches), i.e. one host or a shared file system. A run's client workers are processes of its
task, or Ray actors with ``client_actors`` (:mod:`benchmark.isolation.client_shards`).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from benchmark.data import FederatedSplit
from benchmark.files import Busy
from benchmark.spec import RunSpec

_log = logging.getLogger(__name__)

EXECUTORS = ("local", "ray")
# Ray resources of one run, by profile: every run holds one core; a GPU profile's run a GPU.
RESOURCES = {p: {"num_cpus": 1, "num_gpus": 1} for p in ("paper", "gpu")}
DEFAULT_RESOURCES = {"num_cpus": 1}


@dataclass(frozen=True)
class Job:
    """One run of a suite's grid."""

    label: str
    spec: RunSpec
    row: str = ""  # the suite's row (a method, or a variant's name) the run belongs to


Outcome = tuple[str, dict[str, Any]]  # (run key, record)


@functools.lru_cache(maxsize=4)
def cached_split(path: str) -> FederatedSplit:
    """A split loaded once per process (a suite's runs all read the same one)."""
    from benchmark.split_storage import load_split

    return load_split(path)


def run_job(
    spec: RunSpec,
    runs_root: Path,
    split_path: Path,
    plugin: Path | None,
    finished_only: bool = False,
    stored: Mapping[str, dict[str, Any]] | None = None,
    client_actors: int = 0,
) -> Outcome | None:
    """Run (or resume, or with ``finished_only`` only look up) one spec on the isolated path.
    A run whose record the results store already keeps (``stored``, by run key) is not
    repeated: its record is the outcome."""
    from benchmark.profiles import new_profile
    from benchmark.records import check_same_models
    from benchmark.runner import finished_result, run, run_key_of

    split = cached_split(str(split_path))
    if stored:
        run_key = run_key_of(spec, split, plugin)
        if run_key in stored:
            check_same_models(stored[run_key], new_profile(spec.profile).describe(), "the store")
            return run_key, stored[run_key]
    if finished_only:
        result = finished_result(spec, runs_root=runs_root, split=split, plugin=plugin)
    else:
        result = run(
            spec, runs_root=runs_root, split=split, isolated=True, plugin=plugin,
            client_actors=client_actors,
        )  # fmt: skip
    return None if result is None else (result.run_key, result.record)


Work = Callable[[RunSpec], Outcome | None]  # one run, the suite's paths bound


class Executor(Protocol):
    def outcomes(self, jobs: Sequence[Job], work: Work) -> Iterator[tuple[Job, Outcome | None]]:
        """``work(job.spec)`` for every job, paired with its job, in any order."""


class LocalExecutor:
    """The runs one after another, in this process. A run that another process is running
    (its run directory locked: two ``suite run`` workers sharing a runs root, on one host or
    a file system with working ``flock``) is skipped and taken up again after the others,
    once that process lets go of it, so workers started on the same grid share it out
    instead of repeating or corrupting runs."""

    def __init__(self, poll_s: float = 60.0) -> None:
        self.poll_s = poll_s

    def outcomes(self, jobs: Sequence[Job], work: Work) -> Iterator[tuple[Job, Outcome | None]]:
        waiting, told = list(jobs), ""
        while waiting:
            busy: list[Job] = []
            for job in waiting:
                try:
                    outcome = work(job.spec)
                except Busy:
                    busy.append(job)
                    continue
                yield job, outcome
            if busy and len(busy) == len(waiting):  # nothing moved: wait for the holders
                labels = ", ".join(job.label for job in busy)
                if labels != told:
                    _log.warning("waiting for runs other processes hold: %s", labels)
                    told = labels
                time.sleep(self.poll_s)
            waiting = busy


class RayExecutor:
    """The runs as Ray tasks; joins the cluster at ``address`` (None: the one this process
    already joined, else a new local head on this machine's cores)."""

    def __init__(self, address: str | None = None) -> None:
        self.address = address

    def outcomes(self, jobs: Sequence[Job], work: Work) -> Iterator[tuple[Job, Outcome | None]]:
        import ray

        from benchmark.isolation.client_shards import join_ray

        join_ray(self.address)
        # No retries: Ray would re-run a task its memory monitor killed, without end, and a
        # grid that waits forever hides the failure; a failed run raises here instead, and
        # running the suite again resumes it from its run directory.
        task = ray.remote(max_retries=0)(_apply)  # Ray wraps functions, not partials
        pending = {
            task.options(**RESOURCES.get(job.spec.profile, DEFAULT_RESOURCES)).remote(
                work, job.spec
            ): job
            for job in jobs
        }
        while pending:
            [done], _ = ray.wait(list(pending), num_returns=1)
            yield pending.pop(done), ray.get(done)


def _apply(work: Work, spec: RunSpec) -> Outcome | None:
    return work(spec)


def make_executor(name: str, address: str | None = None) -> Executor:
    if name == "local":
        if address:
            raise ValueError("--address is for the ray executor")
        return LocalExecutor()
    if name == "ray":
        return RayExecutor(address)
    raise ValueError(f"unknown executor {name!r}; expected one of {EXECUTORS}")
