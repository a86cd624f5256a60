"""The shared split pipeline on a small in-test source: filters, parts, chunking, caps, resume."""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path

import pytest
from toy_source import ToySource, make_records

from benchmark import split_storage
from datasets_builders.pipeline import (
    SplitError,
    SplitOptions,
    build_split,
    built_with,
    chunk_texts,
    clean_text,
    load_tokenizer,
    options_for,
)
from datasets_builders.source import SourceRecord

WHOLE = {"span_length": None, "validation_clients": 0, "test_clients": 0}


def build(tmp_path: Path, source: ToySource, name: str = "split", **options):
    out = tmp_path / name
    cache = tmp_path / "cache" / name  # the records cache is keyed by source name + revision
    manifest = build_split(source, SplitOptions(**options), out, cache_dir=cache)
    return manifest, split_storage.load_split(out)


def dated(*dates: str) -> list[SourceRecord]:
    return [
        SourceRecord(f"text posted on {d}", f"r:{d}", client_id=f"u:{d}", date=d) for d in dates
    ]


def test_date_window_keeps_both_edges_and_records_the_field(tmp_path):
    source = ToySource(dated("2023-03-31", "2023-04-01", "2023-06-15", "2023-08-31", "2023-09-01"))
    manifest, split = build(
        tmp_path, source, date_start="2023-04-01", date_end="2023-08-31", **WHOLE
    )
    assert sorted(r["date"] for r in split.records("train")) == [
        "2023-04-01",
        "2023-06-15",
        "2023-08-31",
    ]
    window = manifest["filters"]["date_window"]
    assert window == {
        "start": "2023-04-01",
        "end": "2023-08-31",
        "field": "posted",
        "inclusive": True,
    }
    assert manifest["filters"]["dropped"] == {"before_window": 1, "after_window": 1}


def test_before_window_public_rule_moves_older_records_to_public(tmp_path):
    source = ToySource(dated("2022-12-01", "2023-01-05", "2023-02-01", "2023-02-02"))
    _, split = build(tmp_path, source, date_start="2023-02-01", public="before_window", **WHOLE)
    assert {r["date"] for r in split.records("public")} == {"2022-12-01", "2023-01-05"}
    assert {r["date"] for r in split.records("train")} == {"2023-02-01", "2023-02-02"}


def test_a_person_disjoint_public_part_keeps_no_private_persons_earlier_text(tmp_path):
    """``before_window:person_disjoint``: a person with text in the window has none in the
    public part (plain ``before_window`` puts their earlier text there)."""
    records = [
        SourceRecord(f"{who} wrote on {day}", f"r:{who}:{day}", client_id=who, date=day)
        for who, day in [("ann", "2023-01-05"), ("ann", "2023-02-03"), ("bob", "2023-01-07"),
                         ("cat", "2023-02-04")]
    ]  # fmt: skip
    options = {"date_start": "2023-02-01", **WHOLE}
    _, plain = build(tmp_path, ToySource(records), "plain", public="before_window", **options)
    assert {r["client_id"] for r in plain.records("public")} == {"ann", "bob"}
    manifest, disjoint = build(
        tmp_path, ToySource(records), "disjoint", public="before_window:person_disjoint", **options
    )
    assert {r["client_id"] for r in disjoint.records("public")} == {"bob"}
    assert {r["client_id"] for r in disjoint.records("train")} == {"ann", "cat"}
    assert manifest["filters"]["dropped"]["public_of_a_private_person"] == 1


def test_undated_and_malformed_dates(tmp_path):
    records = [*dated("2023-05-01"), SourceRecord("no date here", "r:none"), *dated("May 5th")]
    manifest, split = build(tmp_path, ToySource(records), date_start="2023-01-01", **WHOLE)
    assert len(split.records("train")) == 1
    assert manifest["filters"]["dropped"] == {"undated": 1, "bad_date": 1}


def test_a_window_on_an_undated_source_is_refused(tmp_path):
    source = ToySource(make_records())
    source.date_field = None
    with pytest.raises(SplitError, match="has no dates"):
        build(tmp_path, source, date_start="2023-01-01", **WHOLE)
    assert not (tmp_path / "split").exists()


def test_cleaning_dedupe_and_licence_filter(tmp_path):
    records = [
        SourceRecord("  Hello\t\tworld \n\n\n second  line ", "a", "u1", licence="cc_by"),
        SourceRecord("hello WORLD\nsecond line", "b", "u2", licence="cc_by"),
        SourceRecord("   ", "c", "u3", licence="cc_by"),
        SourceRecord("short", "d", "u4", licence="cc_by"),
        SourceRecord("a non-commercial text", "e", "u5", licence="cc_by_nc"),
        SourceRecord("a text without licence", "f", "u6"),
    ]
    manifest, split = build(tmp_path, ToySource(records), licences=("cc_by",), min_chars=6, **WHOLE)
    assert split.texts("train") == ["Hello world\nsecond line"]
    assert manifest["filters"]["dropped"] == {
        "duplicate": 1,
        "empty": 1,
        "too_short": 1,
        "licence": 2,
    }
    assert clean_text("a\u00a0 b \r\n\n c") == "a b\nc"


def test_held_out_clients_are_disjoint_and_sized(tmp_path):
    source = ToySource(make_records(n_clients=40, docs_per_client=3))
    manifest, split = build(
        tmp_path, source, span_length=None, validation_clients=0.1, test_clients=6
    )
    clients = {part: set(split.by_client(part)) for part in ("train", "validation", "test")}
    assert (len(clients["validation"]), len(clients["test"]), len(clients["train"])) == (4, 6, 30)
    assert not (clients["train"] & clients["validation"] or clients["train"] & clients["test"])
    assert not clients["validation"] & clients["test"]
    assert all(len(rows) == 3 for rows in split.by_client("train").values())
    assert manifest["counts"]["clients_in_several_private_parts"] == 0
    with pytest.raises(SplitError, match="cannot give"):
        build(
            tmp_path, source, "too-many", span_length=None, validation_clients=20, test_clients=20
        )


def test_public_clients_rule_takes_whole_clients(tmp_path):
    source = ToySource(make_records(n_clients=30))
    _, split = build(tmp_path, source, span_length=None, public="clients:0.2")
    public = set(split.by_client("public"))
    assert len(public) == 6
    assert not public & set().union(
        *(set(split.by_client(p)) for p in ("train", "validation", "test"))
    )


def test_label_public_rule_and_source_pinned_parts(tmp_path):
    records = make_records(n_clients=12)
    records[0] = dataclasses.replace(records[0], extra={"part": "test", "url": "http://x"})
    _, split = build(tmp_path, ToySource(records), public="label:c", **WHOLE)
    assert {r["label"] for r in split.records("public")} == {"c"}
    assert "c" not in {r["label"] for r in split.records("train")}
    assert [r["source_id"] for r in split.records("test")] == ["toy:0:0"]
    assert split.records("test")[0]["url"] == "http://x"
    assert split.records("train")[0]["url"] is None  # extra columns exist on every row
    bad = [dataclasses.replace(records[1], extra={"part": "holdout"})]
    with pytest.raises(SplitError, match="unknown part"):
        build(tmp_path, ToySource(bad), "bad", **WHOLE)


def test_cap_bounds_every_client_deterministically(tmp_path):
    source = ToySource(make_records(n_clients=10, docs_per_client=9))
    options = dict(span_length=None, cap=4, validation_clients=0.2, test_clients=0.2)
    manifest, split = build(tmp_path, source, **options)
    for part in ("train", "validation", "test"):
        assert max(Counter(r["client_id"] for r in split.records(part)).values()) == 4
    assert manifest["filters"]["dropped"]["capped_samples"] == 10 * 5
    _, again = build(tmp_path, source, "again", **options)
    assert again.parts == split.parts
    _, reseeded = build(tmp_path, source, "reseeded", seed=1, **options)
    assert reseeded.parts != split.parts


def test_iid_and_strong_flags_are_recorded(tmp_path):
    source = ToySource(make_records(n_clients=20, docs_per_client=4))
    manifest, split = build(
        tmp_path,
        source,
        span_length=None,
        partition="iid",
        partition_params={"num_clients": 16, "samples_per_client": 5},
        strong_fraction=0.25,
        validation_clients=2,
        test_clients=2,
    )
    assert {len(rows) for rows in split.by_client("train").values()} == {5}
    sidecar = split_storage.read_clients(tmp_path / "split")
    train = sidecar["clients"]["train"]
    assert sum(info["strong"] for info in train.values()) == 3  # round(0.25 * 12)
    assert manifest["partition"]["strong_clients"] == 3
    # each training row carries its client's flag, where the pool reads it
    assert all(r["strong"] == train[r["client_id"]]["strong"] for r in split.records("train"))
    assert all(r["strong"] is None for r in split.records("test"))
    assert len(sidecar["documents"]) == 80 and manifest["filters"]["dropped"] == {}


def test_non_iid_strong_clients_are_the_label_skewed_ones(tmp_path):
    """Paper 001 §1.5: only the strong clients' data are skewed (here to 1 of 3 labels)."""
    source = ToySource(make_records(n_clients=30, docs_per_client=4))
    _, split = build(
        tmp_path,
        source,
        span_length=None,
        partition="label_subset",
        partition_params={"num_clients": 20, "labels_per_client": 1, "skewed_fraction": 0.2},
        strong_fraction=0.2,
        validation_clients=2,
        test_clients=2,
    )
    train = split_storage.read_clients(tmp_path / "split")["clients"]["train"]
    strong = {c for c, info in train.items() if info["strong"]}
    assert strong and strong == {c for c, info in train.items() if "labels" in info}
    for client, rows in split.by_client("train").items():
        if client in strong:
            assert {r["label"] for r in rows} == set(train[client]["labels"])


def test_chunking_gives_fixed_length_spans_and_never_splits_a_character():
    tokenizer = load_tokenizer("gpt2")
    text = " ".join(f"word{i}" for i in range(120))
    spans = chunk_texts([text], tokenizer, 64, 16)[0]
    lengths = [len(ids) for ids in tokenizer.encode_batch(spans)]
    assert len(spans) >= 3 and all(60 <= n <= 65 for n in lengths[:-1])
    emoji = "naïve café 😀🎉 " * 40
    pieces = chunk_texts([emoji], tokenizer, 7, 1)[0]
    assert "\ufffd" not in "".join(pieces)
    assert "".join(pieces).replace(" ", "") == emoji.replace(" ", "")
    assert chunk_texts(["tiny"], tokenizer, 64, 16) == [[]]  # shorter than one span


def test_chunked_build_records_the_tokenizer_and_span_ids(tmp_path):
    records = [SourceRecord("alpha beta gamma delta " * 50, "long", "u1"), *dated("2023-01-01")]
    manifest, split = build(
        tmp_path,
        ToySource(records),
        span_length=32,
        min_span_tokens=10,
        validation_clients=0,
        test_clients=0,
    )
    ids = [r["source_id"] for r in split.records("train")]
    assert ids[:3] == ["long#0", "long#1", "long#2"]
    assert manifest["chunking"]["tokenizer"] == "gpt2"
    assert len(manifest["chunking"]["tokenizer_sha256"]) == 64
    assert manifest["filters"]["dropped"] == {"no_span": 1}  # the one short record


def test_interrupted_fetch_leaves_nothing_and_a_later_build_succeeds(tmp_path):
    records = make_records()
    with pytest.raises(ConnectionError):
        build(tmp_path, ToySource(records, fail_after=25), **WHOLE)
    assert not (tmp_path / "split").exists()
    assert not list((tmp_path / "cache" / "split").glob("records-*.jsonl"))
    manifest, _ = build(tmp_path, ToySource(records), **WHOLE)
    assert manifest["counts"]["records_fetched"] == len(records)


def test_interrupted_write_is_never_a_split_and_the_build_resumes_from_cache(tmp_path, monkeypatch):
    source = ToySource(make_records())

    def crash(tmp: Path, out: Path) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(split_storage, "_replace", crash)
    with pytest.raises(KeyboardInterrupt):
        build(tmp_path, source, **WHOLE)
    assert not (tmp_path / "split").exists()
    assert not list(tmp_path.glob(".split.tmp-*"))  # cleaned up on the way out
    # A hard kill would leave a temporary directory: it is never taken for a split.
    leftover = tmp_path / ".split.tmp-dead"
    (leftover / "data").mkdir(parents=True)
    (leftover / split_storage.MANIFEST).write_text("{}")
    assert list(split_storage.find_splits(tmp_path)) == []
    with pytest.raises(split_storage.IncompleteSplitError, match="not a finished split"):
        split_storage.load_split(leftover)

    monkeypatch.undo()
    manifest, split = build(tmp_path, source, **WHOLE)
    assert source.fetches == 1  # the second build read the records cache
    assert not leftover.exists()
    assert split_storage.is_complete(tmp_path / "split") and split.version == manifest["version"]


def test_existing_split_is_kept_unless_overwritten(tmp_path):
    source = ToySource(make_records())
    first, _ = build(tmp_path, source, **WHOLE)
    with pytest.raises(FileExistsError, match="already holds a finished split"):
        build(tmp_path, source, seed=3, **WHOLE)
    second = build_split(
        source,
        SplitOptions(seed=3, **WHOLE),
        tmp_path / "split",
        cache_dir=tmp_path / "c",
        overwrite=True,
    )
    assert split_storage.read_manifest(tmp_path / "split")["version"] == second["version"]
    assert second["version"] != first["version"]


def test_a_split_is_reused_only_for_the_same_source_options_and_revision(tmp_path):
    """A suite's split is rebuilt when its source's options or the source's revision changed
    (a source option can change the privacy unit: chitchat_prefs' ``client_by``)."""
    source = ToySource(make_records())
    options = SplitOptions(source_options={"history": 2}, **WHOLE)
    build_split(source, options, tmp_path / "split", cache_dir=tmp_path / "c")
    assert built_with(tmp_path / "split", source, options)
    other = dataclasses.replace(options, source_options={"history": 2, "client_by": "side"})
    assert not built_with(tmp_path / "split", source, other)
    assert not built_with(tmp_path / "split", source, dataclasses.replace(options, seed=3))
    source.revision = lambda options: "toy-2"
    assert not built_with(tmp_path / "split", source, options)


def test_options_for_layers_source_recipe_under_overrides():
    source = ToySource([])
    source.split_defaults = {"cap": 8, "partition": "document"}
    options = options_for(source, {"cap": None, "seed": 2})
    assert (options.cap, options.partition, options.seed) == (None, "document", 2)
    source.split_defaults = {"partition": "iid", "partition_params": {"num_clients": 9}}
    merged = options_for(source, {"partition_params": {"samples_per_client": 2}})
    assert merged.partition_params == {"num_clients": 9, "samples_per_client": 2}
    assert options_for(source, {"partition": "natural"}).partition_params == {}
    with pytest.raises(SplitError, match="unknown split options"):
        options_for(source, {"colour": "red"})
    for bad in (
        {"date_start": "2023-13-01"},
        {"date_end": "2023-05-01T12:00"},
        {"date_start": "2023-05-02", "date_end": "2023-05-01"},
        {"validation_clients": 2.5},
        {"public": "clients:"},
        {"dedupe": "fuzzy"},
        {"cap": 0},
    ):
        with pytest.raises(ValueError):
            SplitOptions(**bad).validate()


def test_a_source_may_pin_everything_to_public(tmp_path):
    records = [dataclasses.replace(r, extra={"part": "public"}) for r in make_records(4, 2)]
    manifest, split = build(tmp_path, ToySource(records), span_length=None)
    assert len(split.records("public")) == 8 and not split.records("train")
    assert manifest["counts"]["train"]["clients"] == 0


def test_the_records_cache_is_keyed_by_the_sources_code(tmp_path, monkeypatch):
    """Records a source mapped with older code are not reused to build a split under newer
    code (chitchat's clients changed from conversation sides to people)."""
    from datasets_builders import pipeline

    source, options = ToySource(make_records()), SplitOptions()
    old, new = tmp_path / "old.py", tmp_path / "new.py"
    old.write_text("client = conversation side\n")
    new.write_text("client = person\n")
    monkeypatch.setattr(pipeline.inspect, "getfile", lambda _: str(old))
    before = pipeline._records_cache(source, options, "r1", tmp_path)
    assert pipeline._records_cache(source, options, "r1", tmp_path) == before
    monkeypatch.setattr(pipeline.inspect, "getfile", lambda _: str(new))
    assert pipeline._records_cache(source, options, "r1", tmp_path) != before
