"""The chitchat source: (conversation, sender) clients, dated by conversation start, through
the real pipeline on a fixture in the package's own JSON layout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmark.split_storage import load_split
from datasets_builders.pipeline import build_split, options_for
from datasets_builders.sources.chitchat import ChitchatSource, dataset_path

WORDS = [
    "the",
    "river",
    "garden",
    "stone",
    "light",
    "music",
    "film",
    "robot",
    "computer",
    "summer",
    "friend",
]


def message(text: str, sender: str, when: str) -> dict[str, str]:
    return {"text": text, "timestamp": when, "sender": sender}


def conversation(index: int, start: str, prompt: str | None) -> dict:
    a, b = f"alice{index % 3}", f"bob{index % 4}"
    turns = []
    for turn in range(6):
        sender = a if turn % 2 == 0 else b
        words = " ".join(WORDS[(index + turn + k) % len(WORDS)] for k in range(14))
        turns.append([message(f"{index} {turn} {words}", sender, f"{start}T10:0{turn}:00Z")])
    turns.append([message("   ", a, f"{start}T10:09:00Z")])  # an empty message is skipped
    record = {"messages": turns, "ratings": {"witty": 3}, "start": f"{start}T09:59:00Z"}
    if prompt is not None:
        record["prompt"] = prompt
    return record


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    data = {}
    for i in range(12):  # April: public
        data[f"spring{i:02d}"] = conversation(i, f"2018-04-{10 + i:02d}", "What did you learn?")
    for i in range(40):  # autumn: private, a new prompt set; one without a prompt
        prompt = None if i == 7 else "What if computers asked not to be turned off?"
        data[f"autumn{i:02d}"] = conversation(100 + i, f"2018-10-{1 + i % 28:02d}", prompt)
    data["autumn99"] = data["autumn00"]  # an exact repeat: deduped
    path = tmp_path / "dataset.json"
    path.write_text(json.dumps(data))
    return path


def test_a_client_is_one_senders_side_of_one_conversation(dataset):
    records = list(ChitchatSource().fetch({"path": str(dataset)}, None))
    assert len(records) == 2 * 53
    first = next(r for r in records if r.client_id == "spring00:alice0")
    assert first.date == "2018-04-10" and first.label == "What did you learn?"
    assert first.text.split("\n")[0].startswith("0 0 ") and len(first.text.split("\n")) == 3
    assert first.extra == {"prompt": "What did you learn?", "conversation": "spring00"}
    assert next(r for r in records if r.client_id.startswith("autumn07")).label == ""


def test_the_date_cut_makes_april_public_and_autumn_private(dataset, tmp_path):
    source = ChitchatSource()
    options = options_for(
        source,
        {"source_options": {"path": str(dataset)}, "validation_clients": 4, "test_clients": 6},
    )
    build_split(source, options, tmp_path / "split", cache_dir=tmp_path / "cache")
    split = load_split(tmp_path / "split")
    public = split.records("public")
    assert public and all(r["client_id"].startswith("spring") for r in public)
    held_out = {}
    for part in ("train", "validation", "test"):
        rows = split.records(part)
        assert rows and all(r["client_id"].startswith("autumn") for r in rows)
        held_out[part] = {r["client_id"] for r in rows}
    assert not held_out["train"] & held_out["validation"]
    assert not held_out["train"] & held_out["test"]
    assert len(held_out["validation"]) == 4 and len(held_out["test"]) == 6
    assert len(held_out["train"]) == 2 * 40 - 10  # the repeat of autumn00 was dropped
    window = split.manifest["filters"]["date_window"]
    assert window["field"] == "conversation start" and window["start"] == "2018-05-01"
    build_split(source, options, tmp_path / "again", cache_dir=tmp_path / "cache2")
    assert load_split(tmp_path / "again").content_hash == split.content_hash


def test_malformed_conversations_are_refused_with_their_id(tmp_path):
    path = tmp_path / "dataset.json"
    path.write_text(json.dumps({"c1": {"messages": [[{"text": "hi"}]]}}))
    with pytest.raises(ValueError, match="c1"):
        list(ChitchatSource().fetch({"path": str(path)}, None))


def test_the_packaged_corpus_has_a_population_big_enough_for_dp():
    """The installed 40 MB corpus, read once: >= 5,000 private clients after the cut."""
    records = list(ChitchatSource().fetch({}, None))
    private = {r.client_id for r in records if r.date >= "2018-05-01"}
    public = {r.client_id for r in records if r.date < "2018-05-01"}
    assert dataset_path().exists()
    assert len(private) >= 9000 and len(public) >= 1500
