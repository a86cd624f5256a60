"""Issue 11: what one submission leaves on the host (checkpoints, caches, splits, names) runs
no code in and changes no score of the next, and malformed input ends in one line naming
the field instead of a traceback."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from doubles import StubProfile, make_split
from toy_source import ToySource, make_records

from benchmark import split_storage
from benchmark.artifact import Artifact, ArtifactError
from benchmark.cli.main import cli
from benchmark.method import Method
from benchmark.registry import METHODS, Registry, RegistryError
from benchmark.runner import RunInterrupted, UnsafeCheckpointError, run
from benchmark.spec import SpecError, spec_from_dict
from datasets_builders.pipeline import SplitOptions, build_split
from leaderboard.entries import build_entry, version_definition, version_of
from leaderboard.schema import EntryError
from leaderboard.site import write_site
from leaderboard.store import entry_path, write_entry


class Planted:
    """Unpickling this runs ``os.mkdir(marker)``: the code a planted pickle would run."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (str(self.marker),))


@METHODS.register("hardening_unsafe_state")
class UnsafeState(Method):
    """A method whose round state holds an object only code can rebuild."""

    name = "hardening_unsafe_state"
    artifact_kind = "texts"
    configs = {"tiny": {"marker": ""}}

    def num_rounds(self):
        return 1

    def setup(self, ctx):
        return {}

    def round(self, ctx, state, round_index):
        return {"planted": Planted(Path(self.config["marker"]))}

    def finish(self, ctx, state):
        return Artifact("texts", texts=["a"])


@METHODS.register("hardening_bad_texts")
class BadTexts(Method):
    """A method that breaks its artifact after constructing it."""

    name = "hardening_bad_texts"
    artifact_kind = "texts"
    configs = {"tiny": {}}

    def num_rounds(self):
        return 0

    def setup(self, ctx):
        return {}

    def round(self, ctx, state, round_index):
        return state

    def finish(self, ctx, state):
        artifact = Artifact("texts", texts=["fine"])
        artifact.texts.append(7)
        return artifact


@METHODS.register("hardening_poisoner")
class Poisoner(Method):
    """A method that edits the public and validation records it was handed."""

    name = "hardening_poisoner"
    artifact_kind = "texts"
    configs = {"tiny": {}}

    def num_rounds(self):
        return 0

    def setup(self, ctx):
        for records in (ctx.public, ctx.validation):
            records[0]["text"] = "POISON"
            records.append({"text": "POISON", "client_id": "x"})
        return {}

    def round(self, ctx, state, round_index):
        return state

    def finish(self, ctx, state):
        return Artifact("texts", texts=["a"])


def spec(method="test_noisy_rounds", params=None, **privacy):
    return spec_from_dict(
        {
            "split": {"path": "unused"},
            "method": {"name": method, "params": params or {}},
            "privacy": {"epsilon": 2.0, "delta": 1e-5, **privacy},
            "seed": 5,
        }
    )


def go(root, s, split=None, **kw):
    return run(s, runs_root=root, profile=StubProfile(), split=split or make_split(), **kw)


def build_toy_split(out: Path) -> Path:
    options = SplitOptions(
        span_length=None, partition="natural", validation_clients=0.2, test_clients=0.2
    )
    build_split(ToySource(make_records()), options, out, cache_dir=out.parent / "cache")
    return out


def cli_run(tmp_path, split_path, **privacy):
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(
        json.dumps(
            {
                "split": {"path": str(split_path)},
                "method": {"name": "test_noisy_rounds"},
                "privacy": {"epsilon": 2.0, "delta": 1e-5, **privacy},
            }
        )
    )
    runs = tmp_path / "runs"
    return CliRunner().invoke(cli, ["run", str(spec_file), "--runs-dir", str(runs)])


def assert_one_line_error(result, *fragments):
    assert isinstance(result.exception, SystemExit), result.exception  # not a traceback
    assert result.exit_code != 0
    [line] = result.output.strip().splitlines()
    for fragment in fragments:
        assert fragment in line, line


# 1. checkpoints and caches load without running code


def test_a_planted_checkpoint_pickle_runs_no_code_when_the_run_resumes(tmp_path):
    with pytest.raises(RunInterrupted):
        go(tmp_path / "runs", spec(), stop_after_round=1)
    [run_dir] = (tmp_path / "runs").iterdir()
    marker = tmp_path / "pwned"
    torch.save({"next_round": 1, "method_state": Planted(marker)}, run_dir / "checkpoint.pt")

    with pytest.raises(UnsafeCheckpointError, match=r"refused: it holds .*mkdir"):
        go(tmp_path / "runs", spec())
    assert not marker.exists()


def test_a_checkpoint_of_another_run_is_refused(tmp_path):
    with pytest.raises(RunInterrupted):
        go(tmp_path / "a", spec(), stop_after_round=1)
    with pytest.raises(RunInterrupted):
        go(tmp_path / "b", spec(params={"rounds": 4}), stop_after_round=1)
    [a], [b] = (tmp_path / "a").iterdir(), (tmp_path / "b").iterdir()
    shutil.copyfile(b / "checkpoint.pt", a / "checkpoint.pt")
    with pytest.raises(UnsafeCheckpointError, match="not a checkpoint of run"):
        go(tmp_path / "a", spec())


def test_a_method_state_only_code_could_rebuild_is_refused_when_saved(tmp_path):
    marker = tmp_path / "pwned"
    s = spec("hardening_unsafe_state", params={"marker": str(marker)})
    with pytest.raises(UnsafeCheckpointError, match=r"method state after round 0: .*mkdir"):
        go(tmp_path / "runs", s)
    [run_dir] = (tmp_path / "runs" / ".quarantine").iterdir()  # a failed run is set aside
    assert (run_dir / "spec.json").exists()
    assert not (run_dir / "checkpoint.pt").exists() and not marker.exists()


def test_a_planted_public_start_cache_is_rebuilt_not_used(tmp_path, monkeypatch):
    from model_methods_support import make_context

    from benchmark.training import flat_params, public_start
    from methods.bounds import PublicOnly

    monkeypatch.setenv("FEDSYNTH_CACHE", str(tmp_path / "cache"))
    ctx = make_context(tmp_path, epsilon=0.0)
    config = PublicOnly.resolve_config("tiny", {})
    honest = flat_params(public_start(ctx, config))
    [cached] = (tmp_path / "cache" / "public_start").glob("*.pt")
    for planted in (torch.zeros_like(honest), {"key": "another", "params": honest * 0}):
        torch.save(planted, cached)  # a bare start of the right size, or another key's
        assert torch.equal(flat_params(public_start(ctx, config)), honest)


def test_a_method_editing_its_records_does_not_change_the_next_runs_split(tmp_path):
    split = make_split()
    for part in ("public", "validation"):
        split.parts[part] = [{"text": f"{part} text", "client_id": "p"}]
    before = json.dumps(split.parts)
    go(tmp_path / "runs", spec("hardening_poisoner"), split=split)
    assert json.dumps(split.parts) == before


# 2. names that become paths or markup


@pytest.mark.parametrize("name", ["../escape", "x/y", "<script>", "Caps", "", "a" * 65])
def test_names_outside_the_pattern_cannot_be_registered_or_run(name):
    with pytest.raises(RegistryError, match="must match"):
        Registry("method", "fedsynth.none", "benchmark").register(name)
    with pytest.raises(SpecError, match="method.name: .* must match"):
        spec(method=name)


def test_a_split_name_cannot_put_a_run_outside_the_runs_root(tmp_path):
    split = make_split()
    split.name = "../../outside"
    with pytest.raises(SpecError, match="split.name: '../../outside' must match"):
        go(tmp_path / "deep" / "runs", spec(), split=split)
    assert sorted(p.name for p in tmp_path.rglob("*")) == []


def test_an_entry_cannot_be_written_outside_the_store(tmp_path):
    record = go(tmp_path / "runs", spec()).record
    entry = build_entry([record], version_of(version_definition(["abc"], [])))
    entry["split"]["name"] = "../../outside"
    with pytest.raises(EntryError, match="split.name: '../../outside' is not a plain file"):
        write_entry(tmp_path / "results", entry)
    entry["split"]["name"], entry["method"]["name"] = "toy", "<b>x</b>"
    with pytest.raises(EntryError, match="method.name"):
        entry_path(tmp_path / "results", entry)
    assert not (tmp_path / "outside").exists()


def test_the_site_escapes_names_it_did_not_make(tmp_path):
    store = tmp_path / "results"
    record = go(tmp_path / "runs", spec()).record
    path = write_entry(store, build_entry([record], version_of(version_definition(["abc"], []))))
    path.rename(path.with_name('x" onmouseover="alert(1).json'))  # names on disk, not ours
    (store / "lb-<img src=x onerror=alert(2)>").mkdir()

    index = write_site(store, tmp_path / "site").read_text()
    pages = [index, *(p.read_text() for p in (tmp_path / "site").glob("*/index.html"))]
    assert len(pages) == 3
    assert all("<img" not in p and 'onmouseover="' not in p for p in pages)
    assert "&lt;img src=x onerror=alert(2)&gt;" in index
    assert "x%22%20onmouseover%3D%22alert%281%29.json" in index


# 3. malformed input: one line naming the field


def test_a_missing_path_or_a_directory_that_is_not_a_split_is_one_line(tmp_path):
    assert_one_line_error(cli_run(tmp_path, tmp_path / "nowhere"), "split.path:", "not exist")
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "notes.txt").write_text("not a split")
    assert_one_line_error(cli_run(tmp_path, tmp_path / "plain"), "split.path:", "not a finished")


@pytest.mark.parametrize("delta", [0, 0.0, 1, 1.0])
def test_a_delta_outside_the_open_unit_interval_is_one_line(tmp_path, delta):
    assert_one_line_error(cli_run(tmp_path, tmp_path / "nowhere", delta=delta), "privacy.delta:")


def test_artifact_texts_that_are_not_strings_name_the_field(tmp_path):
    with pytest.raises(ArtifactError, match=r"artifact.texts\[1\]: expected a string, got int"):
        Artifact("texts", texts=["a", 3])
    with pytest.raises(ArtifactError, match=r"artifact.texts\[1\]: expected a string"):
        go(tmp_path / "runs", spec("hardening_bad_texts"))


def test_a_split_edited_after_its_build_is_refused(tmp_path):
    split = build_toy_split(tmp_path / "split")
    sidecar = json.loads((split / split_storage.CLIENTS).read_text())
    sidecar["documents"]["toy:0:0"] = "someone-else"
    (split / split_storage.CLIENTS).write_text(json.dumps(sidecar))
    assert_one_line_error(cli_run(tmp_path, split), "split.path:", "do not match")


# 4. δ ≥ 1/N: refused unless allowed explicitly, and then recorded


def test_a_delta_of_one_over_the_units_or_more_needs_an_explicit_option(tmp_path):
    assert_one_line_error(
        cli_run(tmp_path, build_toy_split(tmp_path / "split"), delta=0.5),
        "privacy.delta: 0.5 is not below 1/",
        "allow_large_delta",
    )
    with pytest.raises(SpecError, match=r"privacy.delta: 0.1 is not below 1/10"):
        go(tmp_path / "runs", spec(delta=0.1))  # 10 clients
    assert not (tmp_path / "runs").exists()
    allowed = go(tmp_path / "runs", spec(delta=0.5, allow_large_delta=True)).record
    assert allowed["spec"]["privacy"]["allow_large_delta"] is True
    entry = build_entry([allowed], version_of(version_definition(["abc"], [])))
    assert entry["spec"]["privacy"]["allow_large_delta"] is True
    ordinary = go(tmp_path / "runs", spec(delta=0.05)).record
    assert "allow_large_delta" not in ordinary["spec"]["privacy"]


def test_a_state_is_checked_and_forwarded_on_the_cpu(monkeypatch):
    """Neither the check that a state loads back nor a state blob loaded with ``cpu`` (the
    coordinator's, which only forwards a method's weights to the worker) puts a second
    copy on the GPU: they load on the CPU (``torch.load`` recorded: no GPU here). A method
    process resuming loads where it saved."""
    import torch

    from benchmark import checkpoints

    seen, load = [], torch.load

    def recorded(*args, **kwargs):
        seen.append(kwargs.get("map_location"))
        return load(*args, **kwargs)

    monkeypatch.setattr(torch, "load", recorded)
    blob = checkpoints.save_checked({"w": torch.ones(2)}, None, "method state")
    assert checkpoints.load_state_blob(blob, cpu=True)["w"].device.type == "cpu"
    checkpoints.load_state_blob(blob)
    assert seen == ["cpu", "cpu", None]
