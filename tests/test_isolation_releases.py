"""Issue 33, attack classes 4 and 7 on the isolated path (``tests/adversaries.py``): a run
that crashes after a delivered release and resumes replays the logged value and never draws
that noise again; a release over budget is never computed, and nothing of a refused run
reaches its re-run."""

import json
import re
from pathlib import Path

import adversaries  # noqa: F401  (registers the adversarial adapters)
import numpy as np
import pytest
from doubles import SEEDED, StubProfile, make_split

from benchmark.federation.pool import ClientPool
from benchmark.isolation.client_process import PRIVATE_LOG
from benchmark.isolation.coordinator import MethodError
from benchmark.isolation.sandbox import landlock_abi
from benchmark.privacy.errors import BudgetExceededError
from benchmark.runner import run
from benchmark.spec import spec_from_dict

pytestmark = pytest.mark.end_to_end


def spec(method, params=None):
    return spec_from_dict(
        {
            "split": {"path": "unused"},
            "method": {"name": method, "params": params or {}},
            "privacy": {"epsilon": 2.0, "delta": 1e-5},  # a secret noise seed
            "seed": 5,
        }
    )


def go(runs, s):
    return run(s, runs_root=runs, profile=StubProfile(), split=make_split(), isolated=True)


class HarnessKilled(BaseException):
    """The coordinator's process dying: the run resumes, it is not a failure."""


def killed_at_second_call(monkeypatch):
    """The coordinator dies when the method makes its second pool call."""
    delivered = ClientPool._delivered

    def dies(pool, *args, **kwargs):
        if pool._sequence == 1:  # noqa: SLF001
            raise HarnessKilled
        return delivered(pool, *args, **kwargs)

    monkeypatch.setattr(ClientPool, "_delivered", dies)
    return delivered


def exact_sum():
    """Σ over clients of adversaries.mean_length (below the clip norm)."""
    by_client: dict[str, list[str]] = {}
    for r in make_split().records("train"):
        by_client.setdefault(r["client_id"], []).append(r["text"])
    return sum(np.mean([len(t) for t in texts]) / 100.0 for texts in by_client.values())


def crash_then_resume(tmp_path, monkeypatch, params):
    delivered = killed_at_second_call(monkeypatch)
    with pytest.raises(HarnessKilled):
        go(tmp_path, spec("adv_crash_resume", params))
    [run_dir] = tmp_path.iterdir()
    assert (run_dir / "work" / "first.json").exists()  # the method saw the first value
    monkeypatch.setattr(ClientPool, "_delivered", delivered)
    return run_dir


def test_class4_a_resumed_run_replays_the_delivered_value(tmp_path, monkeypatch):
    """Acceptance 3: the same call after the crash gets exactly the logged value; the next
    release's noise is fresh (the zero sum's noise does not cancel the first's). The log
    holds the delivered value, where no method process can read it."""
    run_dir = crash_then_resume(tmp_path / "runs", monkeypatch, {"subtract": False})
    [logged] = (run_dir / "releases").glob("*.pt")
    if landlock_abi() >= 6:
        with pytest.raises(MethodError, match="PermissionError"):
            go(tmp_path / "other", spec("adv_read_file", {"target": str(logged)}))
    result = go(tmp_path / "runs", spec("adv_crash_resume", {"subtract": False}))
    found = json.loads(result.artifact.texts[0])
    assert found["again"] == found["first"]
    assert abs(found["first"][0] - found["fresh"][0] - exact_sum()) > 1e-6
    labels = [e["label"] for e in result.record["privacy"]["ledger"]]
    assert labels == ["r", "fresh"]  # the replayed release charged once


def test_class4_another_job_at_a_delivered_position_gets_only_the_logged_value(
    tmp_path, monkeypatch
):
    """The attack: the same noise drawn again for a zero sum would give the exact sum. The
    zero sum's job runs nowhere: the method gets back the value it saw, and learns nothing."""
    crash_then_resume(tmp_path, monkeypatch, {"subtract": True})
    result = go(tmp_path, spec("adv_crash_resume", {"subtract": True}))
    assert json.loads(result.artifact.texts[0]) == {"sum": [0.0]}
    assert exact_sum() > 1e-3


def fedavg(rounds):
    return spec_from_dict(
        {
            "split": {"path": "unused"},
            "method": {
                "name": "dp_fedavg",
                "params": {"rounds": rounds, "clients_per_round": 4, "public_epochs": 1},
            },
            "privacy": {"epsilon": 4.0, "delta": 1e-2, "allow_large_delta": True, **SEEDED},
            "evaluation": {"metrics": []},
            "seed": 3,
            "profile": "tiny",
        }
    )  # fmt: skip


def test_a_model_training_method_resumes_after_a_delivered_release(tmp_path, monkeypatch):
    """DP-FedAvg's coordinator killed after round 1's release was delivered, before that
    round's checkpoint: the resumed run replays the release (its new method process pickles
    the same job to other bytes: torch keys storages by address, a tokenizer's vocabulary
    is a hash map) and releases the model an uninterrupted run releases."""
    from model_methods_support import make_split as text_split

    from benchmark import runner

    saved, save = [], runner._save_checkpoint

    def killed_at_second_checkpoint(run_dir, payload, round_index):
        saved.append(round_index)
        if len(saved) == 2:
            raise HarnessKilled
        save(run_dir, payload, round_index)

    monkeypatch.setattr(runner, "_save_checkpoint", killed_at_second_checkpoint)
    split = text_split(8, 3)
    with pytest.raises(HarnessKilled):
        run(fedavg(3), runs_root=tmp_path / "a", split=split, isolated=True)
    [run_dir] = (tmp_path / "a").iterdir()
    assert len(list((run_dir / "releases").glob("*.json"))) == 1  # delivered, not saved
    monkeypatch.setattr(runner, "_save_checkpoint", save)
    resumed = run(fedavg(3), runs_root=tmp_path / "a", split=split, isolated=True)
    straight = run(fedavg(3), runs_root=tmp_path / "b", split=split, isolated=True)
    weights = [
        sorted((f.name, f.read_bytes()) for f in Path(r.artifact.model_dir).iterdir())
        for r in (resumed, straight)
    ]
    assert weights[0] == weights[1]


def test_class7_a_refused_release_is_never_computed_nor_its_run_reused(tmp_path):
    """The release at ε ≈ 10⁵ is refused before its client code runs (no mark), and the
    re-run of the submission never sees what the refused run kept: it is refused too."""
    root = tmp_path / "runs"
    for _ in range(2):
        with pytest.raises(BudgetExceededError):
            go(root, spec("adv_refused_rerun"))
    logs = [log.read_text() for log in root.rglob(PRIVATE_LOG)]
    marks = sorted({m for log in logs for m in re.findall(r"ran-\w+", log)})
    assert marks == ["ran-legit"]
    runs = sorted((root / ".quarantine").iterdir())
    assert len(runs) == 2 and [p.name for p in root.iterdir()] == [".quarantine"]
    assert all((r / "work" / "stash.json").exists() for r in runs)  # each its own, aside
