"""The chitchat source: a client is one person (sender) across their conversations, dated by
conversation start, through the real pipeline on a fixture in the package's own JSON layout;
and the packaged corpus's split is person-disjoint across train, validation and test."""

from __future__ import annotations

import json
from collections import Counter
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


def conversation(
    index: int, start: str, prompt: str | None, people: tuple[str, str] | None = None
) -> dict:
    # people talk in several conversations
    a, b = people or (f"alice{index % 13}", f"bob{index % 11}")
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
    for i in range(4):  # April only: people with no text in the window
        who = (f"carol{i}", f"dave{i % 2}")
        data[f"spring_only{i}"] = conversation(50 + i, f"2018-04-2{i}", "Any plans?", who)
    for i in range(40):  # autumn: private, a new prompt set; one without a prompt
        prompt = None if i == 7 else "What if computers asked not to be turned off?"
        data[f"autumn{i:02d}"] = conversation(100 + i, f"2018-10-{1 + i % 28:02d}", prompt)
    data["autumn99"] = data["autumn00"]  # an exact repeat: deduped
    path = tmp_path / "dataset.json"
    path.write_text(json.dumps(data))
    return path


def test_a_client_is_one_person_with_all_their_conversations(dataset):
    records = list(ChitchatSource().fetch({"path": str(dataset)}, None))
    assert len(records) == 2 * 57  # one record per person per conversation
    first = next(r for r in records if r.source_id == "chitchat:spring00:alice0")
    assert first.client_id == "alice0" and first.date == "2018-04-10"
    assert first.label == "What did you learn?"
    assert first.text.split("\n")[0].startswith("0 0 ") and len(first.text.split("\n")) == 3
    assert first.extra == {"prompt": "What did you learn?", "conversation": "spring00"}
    # alice0 talks in April and in October: one client, both conversations
    alice = {r.source_id for r in records if r.client_id == "alice0"}
    assert {"chitchat:spring00:alice0", "chitchat:autumn04:alice0"} <= alice
    assert next(r for r in records if r.source_id.startswith("chitchat:autumn07")).label == ""


def test_the_split_is_person_disjoint_and_says_who_a_user_is(dataset, tmp_path):
    source = ChitchatSource()
    options = options_for(
        source,
        {"source_options": {"path": str(dataset)}, "validation_clients": 4, "test_clients": 6},
    )
    build_split(source, options, tmp_path / "split", cache_dir=tmp_path / "cache")
    split = load_split(tmp_path / "split")
    public = split.records("public")
    assert public and all(r["source_id"].startswith("chitchat:spring_only") for r in public)
    # the April conversations of people who also talk in the window stay out of every part
    assert {r["client_id"] for r in public} == {
        "carol0",
        "carol1",
        "carol2",
        "carol3",
        "dave0",
        "dave1",
    }
    people = {}
    for part in ("train", "validation", "test"):
        rows = split.records(part)
        assert rows and all(r["source_id"].startswith("chitchat:autumn") for r in rows)
        # the person is read back from the record's own id, not from the pipeline's client
        people[part] = {r["source_id"].rsplit("#", 1)[0].split(":", 2)[2] for r in rows}
        assert people[part] == {r["client_id"] for r in rows}
    assert not people["train"] & people["validation"]
    assert not people["train"] & people["test"]
    assert not people["validation"] & people["test"]
    assert len(people["validation"]) == 4 and len(people["test"]) == 6
    assert len(people["train"]) == 13 + 11 - 10
    spans = Counter(r["client_id"] for part in ("train", "test") for r in split.records(part))
    assert max(spans.values()) <= 8  # the default cap, per person
    unit = split.manifest["privacy_unit"]
    assert unit == {
        "client": "one chat participant",
        "person": True,
        "cap": 8,
        "statement": "user = one chat participant, ≤ 8 spans each",
    }
    window = split.manifest["filters"]["date_window"]
    assert window["field"] == "conversation start" and window["start"] == "2018-05-01"
    build_split(source, options, tmp_path / "again", cache_dir=tmp_path / "cache2")
    assert load_split(tmp_path / "again").content_hash == split.content_hash


def test_malformed_conversations_are_refused_with_their_id(tmp_path):
    path = tmp_path / "dataset.json"
    path.write_text(json.dumps({"c1": {"messages": [[{"text": "hi"}]]}}))
    with pytest.raises(ValueError, match="c1"):
        list(ChitchatSource().fetch({"path": str(path)}, None))


def test_the_packaged_corpus_gives_a_person_disjoint_split(tmp_path):
    """The installed 40 MB corpus through the bench's recipe: every private span's person
    (read from the raw conversation, not from the pipeline) is in exactly one of train,
    validation and test, and no person has more spans than the cap."""
    source = ChitchatSource()
    options = options_for(source, {"cap": 8})
    build_split(source, options, tmp_path / "split", cache_dir=tmp_path / "cache")
    split = load_split(tmp_path / "split")
    raw = json.loads(dataset_path().read_text(encoding="utf-8"))
    senders = {
        conversation: {str(m["sender"]) for turn in talk["messages"] for m in turn}
        for conversation, talk in raw.items()
    }
    owner_of: dict[str, str] = {}
    for part in ("train", "validation", "test"):
        for row in split.records(part):
            _, conversation, sender = row["source_id"].rsplit("#", 1)[0].split(":", 2)
            assert sender in senders[conversation]
            assert owner_of.setdefault(sender, part) == part, f"{sender} in {part} and more"
    counts = Counter(owner_of.values())
    for row in split.records("public"):  # no private person's earlier text is public
        _, conversation, sender = row["source_id"].rsplit("#", 1)[0].split(":", 2)
        assert sender in senders[conversation] and sender not in owner_of
    # held-out people whose every text is shorter than a span drop out (about 7 %)
    assert 90 <= counts["validation"] <= 100 and 225 <= counts["test"] <= 250
    assert counts["train"] >= 600, counts
    for part in ("train", "validation", "test"):
        assert max(Counter(r["client_id"] for r in split.records(part)).values()) <= 8
    assert split.manifest["privacy_unit"]["person"] is True
