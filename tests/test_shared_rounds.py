"""Runs that differ only in a method's post-processing keys share one run's private rounds
(benchmark.shared_rounds): the same noise, ledger and secret seed, never a second DP run,
and a fork's pool takes no calls."""

import json
import shutil

import pytest
from doubles import PostProcessed, StubProfile, make_split, text_length

import benchmark.runner as runner
from benchmark.privacy.errors import PrivacyError
from benchmark.records import PUBLICATION_REFUSED
from benchmark.runner import RunInterrupted, rounds_from, run
from benchmark.shared_rounds import rounds_key
from benchmark.spec import ResolvedSpec, SpecError, spec_from_dict

SEED = "pool_seed.secret"


def spec(params=None, metrics=None, **privacy):
    data = {
        "split": {"path": "unused"},
        "method": {"name": "test_post_processed", "params": params or {}},
        "privacy": {"epsilon": 2.0, "delta": 1e-5, **privacy},
        "seed": 5,
    }
    if metrics is not None:
        data["evaluation"] = {"metrics": metrics}
    return spec_from_dict(data)


def go(runs, s, **kw):
    return run(s, runs_root=runs, profile=StubProfile(), split=make_split(), **kw)


def dies_in_the_release(monkeypatch, runs, s):
    """Run ``s`` under ``runs`` in a process that dies while it makes the release (after
    any fork)."""

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "checked_artifact", killed)
    with pytest.raises(KeyboardInterrupt):
        go(runs, s)
    monkeypatch.undo()


def dies_after_saving_a_checkpoint(monkeypatch, runs, s):
    """Run ``s`` under ``runs`` in a process that dies just after its first checkpoint save
    (a fork's: its copy of the donor's, before the marker)."""
    save = runner._save_checkpoint

    def saved_then_killed(*args, **kwargs):
        save(*args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "_save_checkpoint", saved_then_killed)
    with pytest.raises(KeyboardInterrupt):
        go(runs, s)
    monkeypatch.undo()


def released(result):
    """(the rounds' noisy sums and method randomness, the post-processing tag)"""
    history, tag = result.artifact.texts
    return json.loads(history), tag


def test_a_run_differing_only_in_post_processing_post_processes_the_first_ones_rounds(tmp_path):
    first = go(tmp_path, spec({"tag": "a"}))
    second = go(tmp_path, spec({"tag": "b"}))
    assert first.run_key != second.run_key
    assert released(second) == (released(first)[0], "b")  # the same noise: secret seeds
    made_from = first.record["rounds"]
    assert made_from["run_key"] == first.run_key and len(made_from["checkpoint_sha256"]) == 64
    assert second.record["rounds"] == made_from and rounds_from(first.run_dir) is None
    assert second.record["privacy"] == first.record["privacy"]  # one run's ε and ledger
    assert (second.run_dir / SEED).read_text() == (first.run_dir / SEED).read_text()
    third = go(tmp_path, spec({"tag": "c"}))  # a fork is never a donor: the first's rounds
    assert third.record["rounds"] == made_from
    # a run with its own rounds (another non-post-processing parameter) draws its own noise
    other = go(tmp_path, spec({"tag": "b", "rounds": 2}))
    assert other.record["rounds"]["run_key"] == other.run_key
    assert released(other)[0] != released(first)[0][:2]
    assert go(tmp_path, spec({"tag": "b"})).record == second.record  # finished: reused


def test_a_forks_pool_takes_no_calls(tmp_path):
    """The fork holds the donor's seed and release counter: a call in its finish would
    draw the noise another fork's (or the donor's own) finish drew, and two such releases
    subtract to an exact sum. So it is refused, before any client code runs."""
    sigma = {"noise_multiplier": 5.0}  # leaves budget for a release in finish
    first = go(tmp_path, spec({"tag": "a", "release_in_finish": True, **sigma}))
    assert len(first.record["privacy"]["ledger"]) == 4  # three rounds and the late release
    with pytest.raises(PrivacyError, match="takes no calls"):
        go(tmp_path, spec({"tag": "b", "release_in_finish": True, **sigma}))
    second = go(tmp_path, spec({"tag": "c", **sigma}))  # its finish calls nothing: shared
    assert second.record["rounds"] == first.record["rounds"]
    assert second.record["privacy"]["ledger"] == first.record["privacy"]["ledger"][:3]


def test_a_fork_makes_no_call_from_its_first_moment(tmp_path, monkeypatch):
    """Not while it resumes either: a sandboxed method process can send pool calls while
    the coordinator waits for its answer to ``resume`` (found in review: two sibling forks
    subtracted their answers to an exact sum). Simulated here by a call from the resume."""
    go(tmp_path, spec({"tag": "a"}))
    resume = runner.InProcessMethod.resume

    def calling(self, state):
        pool = self.ctx.pool
        pool.aggregate(text_length, {}, dim=2, clip_norm=1.0, noise_multiplier=5, label="x")
        resume(self, state)

    monkeypatch.setattr(runner.InProcessMethod, "resume", calling)
    with pytest.raises(PrivacyError, match="takes no calls"):
        go(tmp_path, spec({"tag": "b"}))


def test_a_fork_without_its_checkpoint_is_refused_not_run_afresh(tmp_path, monkeypatch):
    """It holds the donor's seed: run from round 0 it would draw the donor's noise again."""
    go(tmp_path, spec({"tag": "a"}))
    dies_in_the_release(monkeypatch, tmp_path, spec({"tag": "b"}))
    [fork] = [d for d in tmp_path.iterdir() if (d / "rounds_from.json").exists()]
    (fork / "checkpoint.pt").unlink()
    with pytest.raises(PrivacyError, match="without its checkpoint"):
        go(tmp_path, spec({"tag": "b"}))


def test_a_donor_whose_audit_refuted_its_epsilon_lends_no_rounds(tmp_path):
    """Post-processing cannot leak less than what it processes: when the leaderboard
    refused a run's record (its canary audit refuted its ε), no fork of it is made."""
    first = go(tmp_path, spec({"tag": "a"}))
    (first.run_dir / PUBLICATION_REFUSED).write_text('{"reason": "refuted"}')
    second = go(tmp_path, spec({"tag": "b"}))
    assert second.record["rounds"]["run_key"] == second.run_key


def test_an_unmarked_forks_files_are_dropped_whatever_the_next_attempt_declares(
    tmp_path, monkeypatch
):
    """A hostile adapter's declaration may change between attempts: resumed without its
    marker and without a declaration, the donor's checkpoint and seed would run unsealed."""
    first = go(tmp_path, spec({"tag": "a"}))
    dies_after_saving_a_checkpoint(monkeypatch, tmp_path, spec({"tag": "b"}))
    monkeypatch.setattr(PostProcessed, "post_processing", ())
    again = go(tmp_path, spec({"tag": "b"}))
    assert (again.run_dir / SEED).read_text() != (first.run_dir / SEED).read_text()
    assert released(again)[0] != released(first)[0]


def test_an_unreadable_registry_entry_is_replaced(tmp_path):
    from benchmark.shared_rounds import DONORS, donor_of, register_donor

    (tmp_path / DONORS).mkdir()
    (tmp_path / DONORS / "k.json").write_text("")  # a crash between create and write
    assert donor_of(tmp_path, "k") is None
    (tmp_path / "run-a").mkdir()
    register_donor(tmp_path, "k", "run-a")
    register_donor(tmp_path, "k", "run-b")  # run-a's directory exists: it keeps them
    assert donor_of(tmp_path, "k") == "run-a"


def test_a_declared_key_that_changes_the_rounds_fails_the_fork(tmp_path, monkeypatch):
    monkeypatch.setattr(PostProcessed, "post_processing", ("tag", "rounds"))
    go(tmp_path, spec({"tag": "a"}))
    with pytest.raises(PrivacyError, match="stopped after 3 rounds, this one has 2"):
        go(tmp_path, spec({"tag": "b", "rounds": 2}))


def test_only_a_run_directory_no_method_started_in_is_forked(tmp_path):
    """A run killed before has its own secret seed and maybe deliveries its method process
    kept in its scratch: it resumes its own rounds, never another run's."""
    with pytest.raises(RunInterrupted):
        go(tmp_path, spec({"tag": "b"}), stop_after_round=1)
    first = go(tmp_path, spec({"tag": "a"}))
    second = go(tmp_path, spec({"tag": "b"}))
    assert second.record["rounds"]["run_key"] == second.run_key
    assert released(second)[0] != released(first)[0]


def test_a_fork_interrupted_before_or_after_its_marker_ends_as_a_fork(tmp_path, monkeypatch):
    first = go(tmp_path, spec({"tag": "a"}))
    dies_in_the_release(monkeypatch, tmp_path, spec({"tag": "b"}))  # marked
    dies_after_saving_a_checkpoint(monkeypatch, tmp_path, spec({"tag": "c"}))  # unmarked
    marked = go(tmp_path, spec({"tag": "b"}))
    assert marked.record["rounds"] == first.record["rounds"]
    assert released(marked) == (released(first)[0], "b")
    # the donor is gone: the unmarked fork's files (the donor's seed, its state) are dropped
    # and the run runs its own rounds, with a seed of its own
    donor_seed = (first.run_dir / SEED).read_text()
    shutil.rmtree(first.run_dir)
    own = go(tmp_path, spec({"tag": "c"}))
    assert own.record["rounds"]["run_key"] == own.run_key
    assert (own.run_dir / SEED).read_text() != donor_seed
    assert released(own)[0] != released(first)[0]


def test_the_rounds_key_holds_everything_the_rounds_read_but_the_declared_keys():
    def key(s, models=None):
        config = PostProcessed.resolve_config("tiny", s.method.params)
        resolved = ResolvedSpec(s, config, "toy", "v-test")
        return rounds_key(resolved, PostProcessed.post_processing, models or {"m": 1})

    base = key(spec({"tag": "a"}))
    assert key(spec({"tag": "b", "release_in_finish": True})) == base
    assert key(spec({"tag": "a", "rounds": 3})) == base  # a default, given or not
    # a tuning's candidates measure fewer metrics than the published runs: no rounds shared
    assert key(spec({"tag": "a"}, metrics=[{"name": "next_token", "settings": {}}])) != base
    assert key(spec({"rounds": 2})) != base
    assert key(spec(epsilon=3.0)) != base
    assert key(spec(), models={"m": 2}) != base
    assert key(spec(metrics=[{"name": "canary", "settings": {}}])) != base  # holds units out


def test_a_declared_key_must_be_a_config_key(tmp_path, monkeypatch):
    monkeypatch.setattr(PostProcessed, "post_processing", ("tag", "noise"))
    with pytest.raises(SpecError, match="'noise' is not a key of the method's config"):
        go(tmp_path, spec())


@pytest.mark.end_to_end
def test_the_isolated_path_forks_too(tmp_path):
    """The declaration comes from the sandboxed describe process; the sealed pool is the
    coordinator's."""
    first = go(tmp_path, spec({"tag": "a"}), isolated=True)
    second = go(tmp_path, spec({"tag": "b"}), isolated=True)
    assert second.record["rounds"] == first.record["rounds"]
    assert released(second) == (released(first)[0], "b")
    sigma = {"noise_multiplier": 5.0}
    go(tmp_path, spec({"tag": "a", **sigma}), isolated=True)
    with pytest.raises(PrivacyError, match="takes no calls"):
        go(tmp_path, spec({"tag": "b", "release_in_finish": True, **sigma}), isolated=True)
