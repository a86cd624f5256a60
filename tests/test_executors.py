"""A suite's grid on the Ray executor (a local head started here, 2 CPUs), or with its clients
on Ray actors, gives the records the local executor gives with one client worker, run for
run, when the noise comes from the spec."""

import dataclasses

import pytest
from doubles import SEEDED

from leaderboard.catalog import SUITES
from leaderboard.executors import Job, LocalExecutor, RayExecutor, make_executor
from leaderboard.suites import run_suite

pytestmark = pytest.mark.alone  # a local Ray cluster: run after the parallel part (Makefile)

ray = pytest.importorskip("ray")  # the cluster extra; `make test` installs it


@pytest.fixture(scope="module")
def local_head():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def entries(suite, root, name, **options):
    """The suite's entries by method, run into ``root / name`` (the split shared)."""
    got = run_suite(
        suite,
        results_root=root / name / "results",
        runs_root=root / name / "runs",
        splits_root=root / "splits",
        **options,
    )
    return {e["method"]["name"]: e for e in got}


# A method whose clients are called one by one (dp_fedavg's model deltas) and one whose
# clients are called in batches (popri's scores), both releasing through the pool.
METHODS = ("dp_fedavg", "popri")
SUITE = dataclasses.replace(
    SUITES["tiny"],
    methods=METHODS,
    seeds=(0,),
    metrics=({"name": "next_token", "settings": {}},),
    method_privacy={m: SEEDED for m in METHODS},
)


@pytest.fixture(scope="module")
def one_local_worker(tmp_path_factory):
    """The records of the local executor with one client worker: what every other way of
    running the suite must reproduce. Run once for the module."""
    root = tmp_path_factory.mktemp("executors")
    return root, entries(SUITE, root, "local", executor=LocalExecutor())


def assert_same_records(got, expected):
    for method in METHODS:
        a, b = expected[method], got[method]
        assert a["runs"] == b["runs"]
        assert a["metrics"] == b["metrics"]
        assert a["privacy"]["ledgers"] == b["privacy"]["ledgers"]
        assert all(a["privacy"]["ledgers"])  # each run did release through the pool


def test_ray_and_local_executors_give_identical_records(local_head, one_local_worker):
    """The two runs as two Ray tasks at once."""
    root, local = one_local_worker
    assert_same_records(entries(SUITE, root, "ray", executor=RayExecutor()), local)


def test_an_unknown_executor_or_a_stray_address_is_refused():
    with pytest.raises(ValueError, match="unknown executor"):
        make_executor("dask")
    with pytest.raises(ValueError, match="address"):
        make_executor("local", "ray://head:10001")
    assert isinstance(make_executor("ray", "auto"), RayExecutor)


def test_clients_on_ray_actors_give_the_records_of_one_local_worker(
    local_head, one_local_worker, monkeypatch
):
    """Client shards on two Ray actors (each a sandboxed client worker of its range):
    per-client calls and batched ones come back in the pool's order, so with the noise from
    the spec the records are the same."""
    from benchmark.isolation.client_shards import ShardedClients

    root, local = one_local_worker
    calls = []
    rows = ShardedClients.rows
    monkeypatch.setattr(ShardedClients, "rows", lambda self, *a: calls.append(a) or rows(self, *a))
    sharded = entries(SUITE, root, "sharded", client_actors=2)
    assert {batched for *_, batched in calls} == {True, False}
    assert_same_records(sharded, local)


def test_the_local_executor_comes_back_to_runs_other_workers_hold():
    """Busy runs are skipped, the rest run first, and the busy ones are asked again, each
    as soon as its holder lets go (c is not kept waiting behind b); nothing runs twice."""
    from benchmark.files import Busy

    holder_busy_for = {"b": 3, "c": 1}
    calls = []

    def work(spec):
        calls.append(spec)
        if holder_busy_for.get(spec, 0):
            holder_busy_for[spec] -= 1
            raise Busy(spec)
        return spec, {"run": spec}

    jobs = [Job(name, name) for name in "abc"]
    done = list(LocalExecutor(poll_s=0).outcomes(jobs, work))
    assert [job.label for job, _ in done] == ["a", "c", "b"]
    assert [outcome for _, outcome in done] == [(n, {"run": n}) for n in "acb"]
    assert calls == ["a", "b", "c", "b", "c", "b", "b"]
