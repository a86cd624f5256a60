"""Runs that differ only in a method's post-processing keys share one run's private rounds
(benchmark.shared_rounds): the same noise, ledger and secret seed, never a second DP run."""

import json

import pytest
from doubles import StubProfile, make_split

from benchmark.runner import RunInterrupted, rounds_from, run
from benchmark.shared_rounds import rounds_key
from benchmark.spec import ResolvedSpec, SpecError, spec_from_dict


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


def released(result):
    """(the rounds' noisy sums and method randomness, the post-processing tag)"""
    history, tag = result.artifact.texts
    return json.loads(history), tag


def test_a_run_differing_only_in_post_processing_post_processes_the_first_ones_rounds(tmp_path):
    first = go(tmp_path, spec({"tag": "a"}))
    second = go(tmp_path, spec({"tag": "b"}))
    assert first.run_key != second.run_key
    assert released(second) == (released(first)[0], "b")  # the same noise: secret seeds
    assert second.record["rounds_from"] == first.run_key and "rounds_from" not in first.record
    assert second.record["privacy"] == first.record["privacy"]  # one run's ε and ledger
    seed = "pool_seed.secret"
    assert (second.run_dir / seed).read_text() == (first.run_dir / seed).read_text()
    # a run with its own rounds (another non-post-processing parameter) draws its own noise
    other = go(tmp_path, spec({"tag": "b", "rounds": 2}))
    assert "rounds_from" not in other.record
    assert released(other)[0] != released(first)[0][:2]
    assert go(tmp_path, spec({"tag": "b"})).record == second.record  # finished: reused


def test_a_donor_whose_finish_released_is_not_shared(tmp_path):
    sigma = {"noise_multiplier": 5.0}  # leaves budget for the late release
    first = go(tmp_path, spec({"tag": "a", "release_in_finish": True, **sigma}))
    assert len(first.record["privacy"]["ledger"]) == 4  # three rounds and the late release
    second = go(tmp_path, spec({"tag": "b", **sigma}))
    assert "rounds_from" not in second.record
    assert released(second)[0] != released(first)[0]


def test_only_a_run_directory_nothing_ran_in_is_forked(tmp_path):
    """A run killed before has its own secret seed and maybe deliveries its method process
    kept in its scratch: it resumes its own rounds, never another run's."""
    with pytest.raises(RunInterrupted):
        go(tmp_path, spec({"tag": "b"}), stop_after_round=1)
    first = go(tmp_path, spec({"tag": "a"}))
    second = go(tmp_path, spec({"tag": "b"}))
    assert rounds_from(second.run_dir) is None and "rounds_from" not in second.record
    assert released(second)[0] != released(first)[0]


def test_a_fork_interrupted_after_the_fork_resumes_as_a_fork(tmp_path, monkeypatch):
    first = go(tmp_path, spec({"tag": "a"}))
    import benchmark.runner as runner

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # the process dies in the release

    monkeypatch.setattr(runner, "checked_artifact", killed)
    with pytest.raises(KeyboardInterrupt):
        go(tmp_path, spec({"tag": "b"}))
    monkeypatch.undo()
    second = go(tmp_path, spec({"tag": "b"}))
    assert second.record["rounds_from"] == first.run_key
    assert released(second) == (released(first)[0], "b")


def test_the_rounds_key_holds_everything_the_rounds_read_but_the_declared_keys():
    from benchmark.registry import METHODS

    cls = METHODS.get("test_post_processed")

    def key(s):
        config = cls.resolve_config("tiny", s.method.params)
        return rounds_key(ResolvedSpec(s, config, "toy", "v-test"), cls.post_processing)

    base = key(spec({"tag": "a"}))
    assert key(spec({"tag": "b", "release_in_finish": True})) == base
    assert key(spec({"tag": "a"}, metrics=[{"name": "next_token", "settings": {}}])) == base
    assert key(spec({"rounds": 2})) != base
    assert key(spec(epsilon=3.0)) != base
    assert key(spec(metrics=[{"name": "canary", "settings": {}}])) != base  # holds units out


def test_a_declared_key_must_be_a_config_key(tmp_path, monkeypatch):
    from doubles import PostProcessed

    monkeypatch.setattr(PostProcessed, "post_processing", ("tag", "noise"))
    with pytest.raises(SpecError, match="'noise' is not a key of the method's config"):
        go(tmp_path, spec())


@pytest.mark.end_to_end
def test_the_isolated_path_forks_too(tmp_path):
    """The declaration comes from the sandboxed describe process."""
    first = go(tmp_path, spec({"tag": "a"}), isolated=True)
    second = go(tmp_path, spec({"tag": "b"}), isolated=True)
    assert second.record["rounds_from"] == first.run_key
    assert released(second) == (released(first)[0], "b")
