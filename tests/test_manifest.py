"""Manifests and storage: same spec -> same hash, any change -> new version, tampering caught."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from toy_source import ToySource, make_records

from benchmark import split_storage
from benchmark.split_hash import content_hash, version_of
from benchmark.split_manifest import unit_statement
from benchmark.split_storage import verify
from datasets_builders.pipeline import SplitOptions, build_split

OPTIONS = dict(span_length=None, partition="natural", validation_clients=0.2, test_clients=0.2)


def build(tmp_path: Path, name: str, records=None, **overrides) -> dict:
    source = ToySource(records or make_records())
    options = SplitOptions(**{**OPTIONS, **overrides})
    return build_split(source, options, tmp_path / name, cache_dir=tmp_path / f"cache-{name}")


def test_two_builds_of_one_spec_share_hash_and_version(tmp_path):
    first, second = build(tmp_path, "a"), build(tmp_path, "b")
    assert first["content_hash"] == second["content_hash"]
    assert first["version"] == second["version"] == version_of(first["content_hash"])
    assert first["name"] == f"toy-{first['version']}"


@pytest.mark.parametrize(
    "change",
    [{"seed": 1}, {"cap": 2}, {"min_chars": 40}, {"validation_clients": 0.3}],
)
def test_any_change_of_the_spec_gives_a_new_version(tmp_path, change):
    assert build(tmp_path, "base")["version"] != build(tmp_path, "changed", **change)["version"]


def test_a_change_of_the_data_gives_a_new_version(tmp_path):
    records = make_records()
    records[5] = records[5].__class__(**{**records[5].__dict__, "text": "edited text"})
    assert build(tmp_path, "base")["version"] != build(tmp_path, "edited", records)["version"]


def test_manifest_sections(tmp_path):
    manifest = build(tmp_path, "m", cap=2)
    assert manifest["source"] == {
        "name": "toy",
        "revision": "toy-1",
        "options": {},
        "description": "in-test records",
        "demo": False,
        "date_field": "posted",
    }
    assert manifest["build"]["cap"] == 2 and manifest["build"]["tokenizer"] is None
    assert manifest["counts"]["records_fetched"] == 60
    train = manifest["counts"]["train"]
    assert train["samples_per_client"]["max"] <= 2
    assert train["dates"]["min"] >= "2023-05-01"
    assert manifest["licences"] == {"cc_by": 45, "cc_by_nc": 15}
    assert manifest["partition"]["clients_file"]["documents"] == 60
    assert "T" in manifest["fetched_at"] and "T" in manifest["built_at"]


def test_verify_passes_on_a_fresh_build_and_ignores_fetch_time(tmp_path):
    build(tmp_path, "s")
    path = tmp_path / "s"
    assert verify(path).ok
    manifest = json.loads((path / split_storage.MANIFEST).read_text())
    manifest["fetched_at"] = manifest["built_at"] = "1999-01-01T00:00:00+00:00"
    (path / split_storage.MANIFEST).write_text(json.dumps(manifest))
    assert verify(path).ok


def tamper_records(path: Path) -> None:
    from datasets import load_from_disk

    stored = load_from_disk(str(path / split_storage.DATA))
    stored["train"] = stored["train"].map(
        lambda row, i: {"text": row["text"] + "!" if i == 0 else row["text"]}, with_indices=True
    )
    stored.save_to_disk(str(path / "data-new"), num_shards=dict.fromkeys(stored, 1))
    del stored
    shutil.rmtree(path / split_storage.DATA)
    (path / "data-new").rename(path / split_storage.DATA)


def test_verify_catches_tampered_records_manifest_and_sidecar(tmp_path):
    build(tmp_path, "s")
    path = tmp_path / "s"
    for name in ("records", "manifest", "sidecar"):
        copy = tmp_path / name
        shutil.copytree(path, copy)
        if name == "records":
            tamper_records(copy)
        elif name == "manifest":
            manifest = json.loads((copy / split_storage.MANIFEST).read_text())
            manifest["build"]["seed"] = 7
            (copy / split_storage.MANIFEST).write_text(json.dumps(manifest))
        else:
            sidecar = json.loads((copy / split_storage.CLIENTS).read_text())
            sidecar["documents"]["toy:0:0"] = "someone-else"
            (copy / split_storage.CLIENTS).write_text(json.dumps(sidecar))
        result = verify(copy)
        assert not result.ok, name
        assert any("hash" in problem or "sha256" in problem for problem in result.problems)


def test_content_hash_depends_on_record_order_and_parts():
    rows = [{"text": "a", "client_id": "1"}, {"text": "b", "client_id": "2"}]
    base = content_hash({"train": rows}, {"name": "x"}, {"seed": 0}, "s")
    assert base == content_hash(
        {"train": list(rows)}, {"name": "x", "description": "y"}, {"seed": 0}, "s"
    )
    assert base != content_hash({"train": rows[::-1]}, {"name": "x"}, {"seed": 0}, "s")
    assert base != content_hash({"test": rows}, {"name": "x"}, {"seed": 0}, "s")
    assert base != content_hash({"train": rows}, {"name": "x"}, {"seed": 1}, "s")


def test_storage_refuses_incomplete_and_foreign_directories(tmp_path):
    build(tmp_path, "s")
    shutil.rmtree(tmp_path / "s" / split_storage.DATA / "train")
    assert "cannot read" in verify(tmp_path / "s").problems[-1]
    (tmp_path / "s" / split_storage.COMPLETE).unlink()
    with pytest.raises(split_storage.IncompleteSplitError, match="not a finished split"):
        split_storage.load_split(tmp_path / "s")
    with pytest.raises(split_storage.IncompleteSplitError, match="does not exist"):
        split_storage.read_manifest(tmp_path / "missing")
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not a split"):
        build(tmp_path, "foreign")
    assert (foreign / "notes.txt").read_text() == "mine"


def test_find_splits_lists_finished_splits_only(tmp_path):
    build(tmp_path / "root", "one")
    build(tmp_path / "root" / "nested", "two")
    (tmp_path / "root" / "half").mkdir()
    found = [
        p.relative_to(tmp_path / "root").as_posix()
        for p in split_storage.find_splits(tmp_path / "root")
    ]
    assert found == ["nested/two", "one"]
    split = split_storage.load_split(tmp_path / "root" / "one")
    assert split.name.startswith("toy-v-") and len(split.records("train")) > 0


def test_the_manifest_says_who_a_user_is_and_records_repeat_it(tmp_path):
    """A natural client is the source's own (a toy source says nothing of persons); other
    partitions deal synthetic clients; the cap is part of the statement."""
    natural = build(tmp_path, "n", cap=3)["privacy_unit"]
    assert natural == {
        "client": "one natural client of the source",
        "person": False,
        "cap": 3,
        "statement": "user = one natural client of the source, ≤ 3 documents each",
    }
    dealt = build(tmp_path, "d", partition="iid", partition_params={"num_clients": 4})
    assert dealt["privacy_unit"]["person"] is False
    assert "synthetic client dealt by the 'iid' rule" in dealt["privacy_unit"]["statement"]
    assert unit_statement(dealt, "user") == dealt["privacy_unit"]["statement"]
    assert unit_statement({}, "user").startswith("user = one client of the split (its manifest")
    assert unit_statement(dealt, "sample").startswith("sample = one sample (a person may")
