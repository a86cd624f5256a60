"""A suite's grid on the Ray executor (a local head started here, 2 CPUs) gives the records
the local executor gives, run for run, when the noise comes from the spec."""

import dataclasses

import pytest

from leaderboard.executors import LocalExecutor, RayExecutor, make_executor
from leaderboard.suites import SUITES, run_suite

ray = pytest.importorskip("ray")  # the cluster extra; `make test` installs it

SPEC_NOISE = {"noise_seed": "spec", "guarantee": "simulated"}


@pytest.fixture(scope="module")
def local_head():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_ray_and_local_executors_give_identical_records(local_head, tmp_path):
    suite = dataclasses.replace(
        SUITES["tiny"],
        methods=("public_only", "dp_fedavg"),
        seeds=(0, 1),
        metrics=({"name": "next_token", "settings": {}},),
        method_privacy={"dp_fedavg": SPEC_NOISE},
    )

    def entries(executor, name):
        got = run_suite(
            suite,
            results_root=tmp_path / name / "results",
            runs_root=tmp_path / name / "runs",
            splits_root=tmp_path / "splits",
            executor=executor,
        )
        return {e["method"]["name"]: e for e in got}

    local = entries(LocalExecutor(), "local")
    remote = entries(RayExecutor(), "ray")
    assert sorted(local) == sorted(remote) == ["dp_fedavg", "public_only"]
    for method in local:
        a, b = local[method], remote[method]
        assert a["runs"] == b["runs"] and a["spec"]["seeds"] == [0, 1]
        assert a["metrics"] == b["metrics"]
        assert a["privacy"]["ledgers"] == b["privacy"]["ledgers"]
    assert local["dp_fedavg"]["privacy"]["ledgers"][0]  # it did release through the pool


def test_an_unknown_executor_or_a_stray_address_is_refused():
    with pytest.raises(ValueError, match="unknown executor"):
        make_executor("dask")
    with pytest.raises(ValueError, match="address"):
        make_executor("local", "ray://head:10001")
    assert isinstance(make_executor("ray", "auto"), RayExecutor)
