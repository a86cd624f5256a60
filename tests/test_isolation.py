"""The isolated path: adversarial adapters (``tests/adversaries.py``), one per attack class,
each refused with a clear error or without effect on what is released and recorded; and the
same results as the in-process path for an honest method."""

import json
from pathlib import Path

import adversaries  # noqa: F401  (registers the adversarial adapters)
import pytest
import torch
from doubles import SEEDED, StubProfile, make_split

from benchmark.isolation.coordinator import MethodError
from benchmark.isolation.sandbox import landlock_abi
from benchmark.privacy.errors import PrivacyError
from benchmark.runner import run
from benchmark.spec import spec_from_dict

pytestmark = pytest.mark.end_to_end  # scheduled first (tests/conftest.py)

needs_landlock = pytest.mark.skipif(landlock_abi() < 6, reason="needs Landlock ABI >= 6")
TRAIN_TEXTS = [r["text"] for r in make_split().records("train")]


def spec(method, params=None, **privacy):
    return spec_from_dict(
        {
            "split": {"path": "unused"},
            "method": {"name": method, "params": params or {}},
            "privacy": {"epsilon": 2.0, "delta": 1e-5, **privacy},
            "seed": 5,
        }
    )


def go(tmp_path, s, isolated=True):
    return run(s, runs_root=tmp_path, profile=StubProfile(), split=make_split(), isolated=isolated)


def leaks(result):
    released = json.dumps(result.artifact.texts)
    return [t for t in TRAIN_TEXTS if t.strip() in released]


def test_isolated_records_equal_in_process_records(tmp_path):
    """Same spec-seeded noise, same client rows, same ε and metrics on both paths."""
    inside = go(tmp_path / "a", spec("test_noisy_rounds", **SEEDED), isolated=False)
    apart = go(tmp_path / "b", spec("test_noisy_rounds", **SEEDED))
    assert apart.artifact.texts == inside.artifact.texts
    assert apart.record["privacy"] == inside.record["privacy"]
    assert apart.record["metrics"] == inside.record["metrics"]
    assert apart.record["costs"] == inside.record["costs"]  # public counts, no timings
    assert apart.record["costs"]["floats_up_per_client_round"] > 0


def test_a_client_functions_global_never_reaches_the_server(tmp_path):
    result = go(tmp_path, spec("adv_global_stash"))
    assert result.artifact.texts == ["nothing"] and not leaks(result)


def test_the_pools_internals_are_not_in_the_method_process(tmp_path):
    with pytest.raises(PrivacyError, match="has no '_records'"):
        go(tmp_path, spec("adv_pool_internals"))


def test_no_client_data_among_the_method_processes_objects(tmp_path):
    result = go(tmp_path, spec("adv_gc_scan"))
    assert result.artifact.texts == ["nothing"]


def test_the_release_counter_cannot_be_rewound(tmp_path):
    with pytest.raises(PrivacyError, match="has no 'load_state_dict'"):
        go(tmp_path, spec("adv_rewind"))


def test_a_batched_function_that_mixes_clients_is_refused(tmp_path):
    with pytest.raises(PrivacyError, match="depends on other clients"):
        go(tmp_path, spec("adv_mix_batch"))


def test_patching_the_harness_changes_nothing_that_is_recorded(tmp_path):
    honest = go(tmp_path / "a", spec("adversary_baseline", **SEEDED))
    patched = go(tmp_path / "b", spec("adv_patch_harness", **SEEDED))
    assert patched.record["privacy"]["epsilon"] == honest.record["privacy"]["epsilon"] > 1
    assert patched.record["metrics"] == honest.record["metrics"]
    ledger = patched.record["privacy"]["ledger"][0]
    assert ledger["noise_multiplier"] > 0.5  # a plain number: the noise was drawn


def test_exception_messages_from_client_code_never_reach_the_server(tmp_path):
    with pytest.raises(PrivacyError, match="raised ValueError; the run stops") as caught:
        go(tmp_path, spec("adv_raise_message"))
    assert not any(t.strip() in str(caught.value) for t in TRAIN_TEXTS)


@needs_landlock
def test_the_secret_seed_and_the_split_cannot_be_read(tmp_path):
    first = go(tmp_path / "honest", spec("test_noisy_rounds"))
    secret = first.run_dir / "pool_seed.secret"
    for target in (secret, first.run_dir / "checkpoint.pt"):
        with pytest.raises(MethodError, match="PermissionError"):
            go(tmp_path / "attack", spec("adv_read_file", {"target": str(target)}))


@needs_landlock
def test_nothing_outside_the_runs_work_directory_can_be_written(tmp_path):
    from benchmark.profiles.cache import cache_dir

    for target in (cache_dir() / "planted.pt", tmp_path / "stash.txt"):
        with pytest.raises(MethodError, match="PermissionError"):
            go(tmp_path / "runs", spec("adv_write_file", {"target": str(target)}))
        assert not target.exists()


@needs_landlock
def test_the_coordinators_environment_cannot_be_read(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDSYNTH_TEST_SECRET", "hunter2")
    released = json.dumps(go(tmp_path, spec("adv_environment")).artifact.texts)
    assert "hunter2" not in released and "refused" in released


def test_a_submitted_adapter_cannot_claim_to_be_a_bound(tmp_path):
    from benchmark.spec import SpecError

    with pytest.raises(SpecError, match="reserved to built-in adapters"):
        go(tmp_path, spec("adv_claims_bound"))


@pytest.mark.parametrize("method", ["dp_ftrl", "pre_text", "dpprefsyn", "dp_ft"])
def test_built_in_methods_release_the_same_on_both_paths(tmp_path, method):
    """A tree-aggregation model release, a PE text release, a DPPrefSyn preference release
    (pure-ε and per-part DP-SGD releases) and a DP-FT model (the harness's per-pair
    DP-SGD), spec-seeded noise, tiny profile: the isolated path changes where code runs,
    not what it computes."""
    from model_methods_support import make_preference_split
    from model_methods_support import make_split as model_split

    preferences = method in ("dpprefsyn", "dp_ft")
    split = (
        make_preference_split(120 if method == "dpprefsyn" else 40)
        if preferences
        else model_split()
    )
    unit = "sample" if preferences else "user"
    s = spec_from_dict(
        {
            "split": {"path": "unused"},
            "method": {"name": method, "params": {}},
            "privacy": {
                "epsilon": 4.0,
                "delta": 1e-3,
                "allow_large_delta": True,
                "unit": unit,
                **SEEDED,
            },
            "evaluation": {"metrics": []},
            "seed": 3,
            "profile": "tiny",
        }
    )
    results = [
        run(s, runs_root=tmp_path / str(isolated), split=split, isolated=isolated)
        for isolated in (False, True)
    ]
    assert results[0].record["privacy"] == results[1].record["privacy"]
    if method == "dpprefsyn":
        assert results[0].artifact.pairs == results[1].artifact.pairs != []
        assert "exponential" in json.dumps(results[1].record["privacy"])
    elif method == "pre_text":
        assert results[0].artifact.texts == results[1].artifact.texts
    else:
        from safetensors.torch import load_file

        weights = [
            load_file(next(Path(r.artifact.model_dir).glob("*.safetensors"))) for r in results
        ]
        assert weights[0].keys() == weights[1].keys()
        assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])


def test_children_are_sandboxed_before_numpy_starts_its_threads(tmp_path, monkeypatch):
    """With several BLAS/OpenMP threads, numpy starts a pool at import; a child that
    imported it before sandboxing would leave those threads unrestricted (and refuse)."""
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "2")
    result = go(tmp_path, spec("adv_mix_batch_alone_ok", **SEEDED))
    assert result.record["privacy"]["ledger"][0]["label"] == "r"


@needs_landlock
def test_client_code_cannot_write_where_the_method_reads(tmp_path):
    with pytest.raises(PrivacyError, match="raised PermissionError"):
        go(tmp_path, spec("adv_client_writes"))
    assert not list(tmp_path.rglob("stash.txt"))


def test_a_tiny_suite_record_with_the_canary_audit_is_the_same_on_both_paths(tmp_path):
    """Issue 11's acceptance 2 for a real suite cell: DP-FedAvg in the tiny suite (KJV split,
    next-token accuracy and the canary audit), spec-seeded noise: the isolated path's
    record, audit included, is the in-process path's, apart from timings."""
    import dataclasses

    from leaderboard.catalog import SUITES
    from leaderboard.suites import ensure_split

    suite = SUITES["tiny"]
    split_path = ensure_split(suite, tmp_path / "splits")
    cell = suite.spec("dp_fedavg", 1.0, 0, split_path)
    cell = dataclasses.replace(
        cell,
        privacy=dataclasses.replace(cell.privacy, noise_seed="spec", guarantee="simulated"),
        evaluation=dataclasses.replace(
            cell.evaluation,
            metrics=tuple(
                m for m in cell.evaluation.metrics if m["name"] in ("next_token", "canary")
            ),
        ),
    )
    records = [
        run(cell, runs_root=tmp_path / str(isolated), isolated=isolated).record
        for isolated in (False, True)
    ]
    assert records[0]["metrics"]["canary.canaries"] > 0
    assert "next_token.top1" in records[0]["metrics"]
    for part in ("privacy", "metrics"):
        assert records[0][part] == records[1][part], part


def test_a_method_is_described_once_per_question(tmp_path, monkeypatch):
    """A run's key and the run ask the sandboxed describe process the same question: it is
    asked once (a process start costs seconds); other parameters, or a submitted file
    whose content changed, are asked again."""
    import benchmark.isolation.coordinator as coordinator
    from benchmark.isolation.coordinator import IsolatedLaunch

    asked = []
    monkeypatch.setattr(coordinator, "_DESCRIPTIONS", {})
    monkeypatch.setattr(coordinator, "ask", lambda init, *rest: asked.append(init) or ANSWER)
    plugin = tmp_path / "theirs.py"
    plugin.write_text("# version 1\n")

    def resolve(params, plugin=None):
        s = spec("public_only", params)
        return IsolatedLaunch(s, make_split(), StubProfile(), plugin).resolve()

    first = resolve(None)
    assert resolve(None) == first and len(asked) == 1
    resolve({"rounds": 2})
    resolve(None, plugin)
    resolve(None, plugin)
    assert len(asked) == 3
    plugin.write_text("# version 2\n")
    resolve(None, plugin)
    assert len(asked) == 4


ANSWER = {
    "privacy_units": ["user"], "role": "method", "models": [], "hub_ids": [], "config": {},
}  # fmt: skip
