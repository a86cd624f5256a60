"""Hub loader: local files in the hub schemas, revisions, and a clear offline error."""

import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from datasets_builders.hub import HubDataset, HubError, files_revision, iter_rows

ROWS = [{"text": "a", "n": 1}, {"text": "b", "n": 2}]


def test_every_local_format_reads_the_same_rows(tmp_path):
    pq.write_table(pa.Table.from_pylist(ROWS), tmp_path / "x.parquet")
    with gzip.open(tmp_path / "x.jsonl.gz", "wt") as fh:
        fh.write("\n".join(json.dumps(r) for r in ROWS) + "\n\n")
    (tmp_path / "x.json").write_text(json.dumps(ROWS))  # a JSON array, not JSON lines
    (tmp_path / "x.csv").write_text("text,n\na,1\nb,2\n")
    hub = HubDataset("org/name")
    for name in ("x.parquet", "x.jsonl.gz", "x.json"):
        assert list(iter_rows(hub, local_files=[tmp_path / name])) == ROWS
    assert list(iter_rows(hub, local_files=[tmp_path / "x.csv"])) == [
        {"text": "a", "n": "1"},
        {"text": "b", "n": "2"},
    ]


def test_directories_and_globs_expand_sorted(tmp_path):
    for i in (2, 1):
        (tmp_path / f"part-{i}.jsonl").write_text(json.dumps({"i": i}))
    hub = HubDataset("org/name")
    assert [r["i"] for r in iter_rows(hub, local_files=[tmp_path])] == [1, 2]
    assert [r["i"] for r in iter_rows(hub, local_files=[str(tmp_path / "part-*.jsonl")])] == [1, 2]


def test_bad_local_input_is_explained(tmp_path):
    hub = HubDataset("org/name")
    with pytest.raises(HubError, match="not found"):
        list(iter_rows(hub, local_files=[tmp_path / "missing.parquet"]))
    (tmp_path / "bad.jsonl").write_text('{"a": 1}\n{"a": \n')
    with pytest.raises(HubError, match="line 2 is not JSON"):
        list(iter_rows(hub, local_files=[tmp_path / "bad.jsonl"]))
    (tmp_path / "x.txt").write_text("hello")
    with pytest.raises(HubError, match="unsupported local file type"):
        list(iter_rows(hub, local_files=[tmp_path / "x.txt"]))


def test_files_revision_follows_content(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text('{"a": 1}')
    first = files_revision([path])
    assert files_revision([path]) == first
    path.write_text('{"a": 2}')
    assert files_revision([path]) != first


def test_offline_hub_gives_a_clear_error(tmp_path):
    hub = HubDataset("Anthropic/hh-rlhf", revision="abc123")
    assert hub.describe() == "Anthropic/hh-rlhf@abc123 split=train"
    with pytest.raises(HubError, match="--option files=PATH"):
        list(iter_rows(hub, cache_dir=tmp_path))
