"""The runner: budget enforcement, quarantine, and exact resume after a kill."""

import json
import math

import numpy as np
import pytest
import torch
from doubles import SEEDED, StubProfile, make_split

from benchmark.privacy.errors import BudgetExceededError
from benchmark.records import StaleRecordError
from benchmark.runner import RunInterrupted, run
from benchmark.spec import SpecError, spec_from_dict


def spec(**overrides):
    data = {
        "split": {"path": "unused"},
        "method": {"name": "test_noisy_rounds", "params": overrides.pop("params", {})},
        "privacy": {"epsilon": 2.0, "delta": 1e-5, **overrides.pop("privacy", {})},
        "seed": 5,
    }
    return spec_from_dict(data)


def go(tmp_path, s, **kw):
    return run(s, runs_root=tmp_path, profile=StubProfile(), split=make_split(), **kw)


def test_run_writes_record_with_recomputed_epsilon(tmp_path):
    result = go(tmp_path, spec())
    privacy = result.record["privacy"]
    assert 1.5 < privacy["epsilon"] <= 2.0  # calibrated by the harness accountant
    assert len(privacy["ledger"]) == 3
    assert result.record["split"] == {"name": "toy", "version": "v-test", "content_hash": "abc"}
    assert result.record["costs"]["participations"] == 30
    on_disk = json.loads((result.run_dir / "result.json").read_text())
    assert on_disk["run_key"] == result.run_key


def test_budget_exceeded_names_both_numbers(tmp_path):
    with pytest.raises(BudgetExceededError, match=r"epsilon=\d+\.\d+ .*allows epsilon=0\.5"):
        go(tmp_path, spec(params={"noise_multiplier": 1.0}, privacy={"epsilon": 0.5}))


def test_epsilon_zero_allows_no_release(tmp_path):
    with pytest.raises(Exception, match="allows no private release"):
        go(tmp_path, spec(privacy={"epsilon": 0}))


def test_noise_free_diagnostic_lands_only_in_quarantine(tmp_path):
    result = go(tmp_path, spec(params={"secret_diagnostic": True}))
    quarantined = (result.run_dir / "private_diagnostics" / "diagnostics.jsonl").read_text()
    assert "exact_client_count_SECRET" in quarantined
    published = (result.run_dir / "result.json").read_text()
    assert "SECRET" not in published and "private_diagnostics" not in published


def noise(result):
    """The noisy sums of every round (the artifact of ``test_noisy_rounds``)."""
    return [row[:2] for row in json.loads(result.artifact.texts[0])]


def test_noise_comes_from_a_secret_seed_kept_only_in_the_run_directory(tmp_path):
    first, second = go(tmp_path / "a", spec()), go(tmp_path / "b", spec())
    assert first.run_key == second.run_key and noise(first) != noise(second)
    secret = (first.run_dir / "pool_seed.secret").read_text()
    assert int(secret).bit_length() > 64
    published = (first.run_dir / "result.json").read_text()
    assert secret not in published and first.record["privacy"]["noise_seed"] == "secret"


def test_spec_seeded_noise_is_reproducible_but_not_formal(tmp_path):
    a, b = go(tmp_path / "a", spec(privacy=SEEDED)), go(tmp_path / "b", spec(privacy=SEEDED))
    assert noise(a) == noise(b) and a.record["privacy"]["guarantee"] == "simulated"
    with pytest.raises(SpecError, match="cannot be formal"):
        spec(privacy={"noise_seed": "spec"})


def test_killed_run_with_a_secret_seed_resumes_with_the_same_noise(tmp_path):
    with pytest.raises(RunInterrupted):
        go(tmp_path, spec(), stop_after_round=1)
    [run_dir] = tmp_path.iterdir()
    secret = (run_dir / "pool_seed.secret").read_text()
    first_round = torch.load(run_dir / "checkpoint.pt", weights_only=False)["method_state"]
    resumed = go(tmp_path, spec())
    assert (run_dir / "pool_seed.secret").read_text() == secret
    assert noise(resumed)[0] == first_round["history"][0][:2]


def test_killed_run_resumes_to_identical_result(tmp_path):
    full = go(tmp_path / "a", spec(privacy=SEEDED))
    with pytest.raises(RunInterrupted):
        go(tmp_path / "b", spec(privacy=SEEDED), stop_after_round=1)
    torch.manual_seed(12345)  # a fresh process would have arbitrary global RNG state
    np.random.seed(999)
    resumed = go(tmp_path / "b", spec(privacy=SEEDED))
    assert resumed.artifact.texts == full.artifact.texts
    assert resumed.record["privacy"] == full.record["privacy"]
    assert resumed.record["costs"]["participations"] == full.record["costs"]["participations"]
    assert not math.isnan(json.loads(full.artifact.texts[0])[2][2])


def test_an_atomic_write_leaves_the_old_file_or_the_new_one_and_no_temporary(tmp_path):
    from benchmark.files import atomic_write

    path = tmp_path / "deep" / "record.json"
    atomic_write(path, "old")
    atomic_write(path, b"new")
    assert path.read_text() == "new"

    class Unwritable(str):
        def encode(self, *args):
            raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write(path, Unwritable("never"))
    assert path.read_text() == "new" and [p.name for p in path.parent.iterdir()] == ["record.json"]


def test_a_run_another_process_holds_is_refused_until_it_lets_go(tmp_path):
    """Two suite workers sharing a runs root: the second finds the run locked and leaves it
    alone; once the holder is gone (the kernel drops a dead holder's lock) it resumes."""
    import subprocess
    import sys

    from benchmark.runner import RunBusy

    with pytest.raises(RunInterrupted):
        go(tmp_path, spec(), stop_after_round=1)
    [run_dir] = tmp_path.iterdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(run_dir / "run.lock")], stdout=subprocess.PIPE
    )
    try:
        assert holder.stdout.readline() == b"locked\n"
        with pytest.raises(RunBusy, match="running in another process"):
            go(tmp_path, spec())
    finally:
        holder.kill()
        holder.wait()
    assert go(tmp_path, spec()).record["privacy"]["epsilon"] > 0


HOLD_LOCK = """
import fcntl, sys, time
fh = open(sys.argv[1], "a+b")
fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(600)
"""


# -- issue 33: a delivered release is never redrawn; nothing from a failed run is reused


class SimulatedKill(BaseException):
    """The harness's process dying (a kill, a power cut): not an error of the run."""


def test_a_run_killed_mid_round_replays_what_it_delivered(tmp_path, monkeypatch):
    """Killed after round 1's release was delivered and before its checkpoint: the resumed
    run gets that release from the log (not recomputed, charged once) and ends as an
    uninterrupted run does."""
    import benchmark.runner as runner
    from benchmark.federation.release_log import ReleaseLog

    full = go(tmp_path / "a", spec(privacy=SEEDED))
    save = runner._save_checkpoint

    def dies_in_round_1(run_dir, payload, round_index):
        if round_index == 1:
            raise SimulatedKill
        save(run_dir, payload, round_index)

    monkeypatch.setattr(runner, "_save_checkpoint", dies_in_round_1)
    with pytest.raises(SimulatedKill):
        go(tmp_path / "b", spec(privacy=SEEDED))
    [run_dir] = (tmp_path / "b").iterdir()  # not quarantined: a killed run resumes
    assert sorted(p.name for p in (run_dir / "releases").glob("*.json")) == ["00000001.json"]
    monkeypatch.setattr(runner, "_save_checkpoint", save)
    replayed = []
    replay = ReleaseLog.replay
    monkeypatch.setattr(ReleaseLog, "replay", lambda log, i: replayed.append(i) or replay(log, i))
    resumed = go(tmp_path / "b", spec(privacy=SEEDED))
    assert replayed == [1]
    assert resumed.artifact.texts == full.artifact.texts
    assert resumed.record["privacy"] == full.record["privacy"]  # round 1 charged once
    assert not list((run_dir / "releases").iterdir())  # pruned at the next checkpoint


def test_a_refused_run_is_quarantined_and_its_rerun_starts_afresh(tmp_path):
    refused = spec(params={"noise_multiplier": 1.0}, privacy={"epsilon": 0.5})
    for _ in range(2):
        with pytest.raises(BudgetExceededError) as caught:
            go(tmp_path, refused)
        assert "quarantined in" in "\n".join(caught.value.__notes__)
    assert [p.name for p in tmp_path.iterdir()] == [".quarantine"]
    first, second = sorted((tmp_path / ".quarantine").iterdir())
    seeds = [(d / "pool_seed.secret").read_text() for d in (first, second)]
    assert seeds[0] != seeds[1]  # the re-run drew its own secret seed
    assert not (first / "checkpoint.pt").exists() and not list((first / "releases").glob("*"))


class ProfileWithGenerator(StubProfile):
    def __init__(self, generator):
        self.generator_label = generator

    def describe(self):
        return {"profile": "stub", "generator": self.generator_label}


def test_a_finished_run_is_reused_only_with_the_models_it_was_made_with(tmp_path):
    first = run(spec(), runs_root=tmp_path, profile=ProfileWithGenerator("A"), split=make_split())
    again = run(spec(), runs_root=tmp_path, profile=ProfileWithGenerator("A"), split=make_split())
    assert again.record == first.record
    with pytest.raises(StaleRecordError, match="another generator .'A'.*now has 'B'"):
        run(spec(), runs_root=tmp_path, profile=ProfileWithGenerator("B"), split=make_split())
