"""The chitchat preference source: one pair per reply turn (real reply over a reply from
another conversation), repliers as clients, replies' dates; on fixtures in the package's
own dataset.json layout, and through the real pipeline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_source_chitchat import WORDS, message

from benchmark.registry import DATASETS
from benchmark.split_storage import load_split
from datasets_builders.pipeline import build_split, options_for
from datasets_builders.sources.chitchat_prefs import ChitchatPreferenceSource, clip

H, A = "\n\nHuman: ", "\n\nAssistant: "
SPRING, AUTUMN = "What did you learn?", "Can computers fall in love?"


def conversation(name: str, day: str, a: str, b: str, prompt: str | None, turns: int = 5) -> dict:
    """``turns`` alternating one-message turns, a then b, on ``day``; texts name their turn."""
    messages = []
    for turn in range(turns):
        words = " ".join(WORDS[(len(name) + turn + k) % len(WORDS)] for k in range(8))
        sender = a if turn % 2 == 0 else b
        messages.append([message(f"{name} {turn} {words}", sender, f"{day}T10:0{turn}:00Z")])
    record = {"messages": messages, "ratings": {"witty": 3}, "start": f"{day}T09:59:00Z"}
    if prompt is not None:
        record["prompt"] = prompt
    return record


# Spans midnight into the private window; B's messages split by an empty one are one turn.
TALK = {
    "messages": [
        [message("hi there", "A", "2018-04-30T23:57:00Z")],
        [
            message("hello", "B", "2018-04-30T23:58:00Z"),
            message("how are you?", "B", "2018-04-30T23:58:30Z"),
        ],
        [message("   ", "B", "2018-04-30T23:59:00Z")],
        [message("still there?", "B", "2018-04-30T23:59:30Z")],
        [message("fine thanks", "A", "2018-05-01T00:01:00Z")],
        [message("good to hear", "B", "2018-05-01T00:02:00Z")],
        [message("bye", "A", "2018-05-01T00:03:00Z")],
    ],
    "ratings": {},
    "start": "2018-04-30T23:56:00Z",
    "prompt": SPRING,
}


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    data = {"talk": TALK}
    for i in range(8):  # April: public, and the pool rejected replies come from
        data[f"spring{i}"] = conversation(
            f"spring{i}", f"2018-04-{10 + i}", f"q{i % 2}", f"q{2 + i % 2}", SPRING
        )
    for i in range(12):  # autumn: private; 6 speakers, 1 conversation without a prompt
        prompt = None if i == 5 else AUTUMN
        data[f"autumn{i:02d}"] = conversation(
            f"autumn{i:02d}", f"2018-10-{1 + i:02d}", f"p{i % 6}", f"p{(i + 3) % 6}", prompt
        )
    data["autumn_fall"] = conversation("autumn_fall", "2018-04-20", "q0", "q1", AUTUMN)
    data["monologue"] = {  # one speaker: no reply, no record
        "messages": [[message("anyone?", "m", "2018-10-02T10:00:00Z")]],
        "start": "2018-10-02T10:00:00Z",
        "prompt": AUTUMN,
    }
    path = tmp_path / "dataset.json"
    path.write_text(json.dumps(data))
    return path


def fetch(path: Path, **options) -> tuple[list, ChitchatPreferenceSource]:
    source = ChitchatPreferenceSource()
    return list(source.fetch({"path": str(path), **options}, None)), source


def test_a_record_is_a_reply_turn_in_context_with_the_replier_as_client(dataset):
    records, _ = fetch(dataset)
    talk = [r for r in records if r.extra["conversation"] == "talk"]
    b_turn = "hello\nhow are you?\nstill there?"  # merged across the empty message
    assert [(r.extra["prompt"], r.extra["chosen"], r.client_id, r.date) for r in talk] == [
        (f"{H}hi there{A}", b_turn, "B", "2018-04-30"),
        (f"{H}{b_turn}{A}", "fine thanks", "A", "2018-05-01"),  # opens on a Human turn
        (f"{H}hi there{A}{b_turn}{H}fine thanks{A}", "good to hear", "B", "2018-05-01"),
        (f"{H}{b_turn}{A}fine thanks{H}good to hear{A}", "bye", "A", "2018-05-01"),
    ]
    first = talk[0]
    assert first.text == first.extra["prompt"] + first.extra["chosen"]
    assert first.source_id == "chitchat_prefs:talk:1" and first.extra["turn"] == 1
    assert first.label == SPRING and first.licence == "MIT"
    # 5 turns -> 4 replies per generated conversation; the monologue gives none
    assert len(records) == 4 + 4 * (8 + 12 + 1)
    assert not any(r.extra["conversation"] == "monologue" for r in records)
    for record in records:
        assert record.extra["prompt"].startswith(H) and record.extra["prompt"].endswith(A)
        conv, turn = record.extra["conversation"], record.extra["turn"]
        if conv != "talk":  # generated turns alternate a, b, a, ...: the replier is known
            (msg,) = json.loads(dataset.read_text())[conv]["messages"][turn]
            assert record.extra["chosen"] == msg["text"]
            assert record.client_id == msg["sender"] and record.date == msg["timestamp"][:10]
    by_conversation, _ = fetch(dataset, client_by="conversation")
    assert by_conversation[0].client_id == "autumn00:p3"


def test_rejected_is_a_public_reply_from_another_conversation_on_the_topic(dataset):
    records, source = fetch(dataset)
    by_id = {r.source_id: r for r in records}
    for record in records:
        other = by_id[record.extra["rejected_from"]]  # the pool's replies are records too
        assert other.extra["conversation"] != record.extra["conversation"]
        assert record.extra["rejected"] == other.extra["chosen"] != record.extra["chosen"]
        assert other.date < "2018-05-01"  # rejected_before: April replies only
        if record.label and record.extra["conversation"] != "autumn_fall":
            assert other.label == record.label  # a reply on the same topic
    # no topic (autumn05), or the topic's only April replies are its own (autumn_fall): any
    assert len([r for r in records if not r.label]) == 4
    assert source.stats["rejected from any"] == 8
    assert source.stats["rejected from same topic"] == len(records) - 8
    # without the cut, autumn replies can be drawn too
    anywhere, _ = fetch(dataset, rejected_before="none")
    assert any(r.extra["rejected_from"].startswith("chitchat_prefs:autumn") for r in anywhere)


def test_rejected_never_equals_chosen_nor_comes_from_the_same_conversation(tmp_path):
    """One April conversation on the topic repeats the chosen text; the other candidates
    are in the record's own conversation: every seed must still pick the one valid reply."""
    data = {
        "x": {
            "messages": [
                [message("Mozart or Beethoven?", "u", "2018-04-11T10:00:00Z")],
                [message("lol", "v", "2018-04-11T10:01:00Z")],
                [message("seriously, which?", "u", "2018-04-11T10:02:00Z")],
            ],
            "prompt": "Mozart or Beethoven?",
        },
        "y": {
            "messages": [
                [message("hey", "s", "2018-04-12T10:00:00Z")],
                [message("LOL ", "t", "2018-04-12T10:01:00Z")],
                [message("Beethoven, always.", "s", "2018-04-12T10:02:00Z")],
            ],
            "prompt": "Mozart or Beethoven?",
        },
    }
    path = tmp_path / "dataset.json"
    path.write_text(json.dumps(data))
    for seed in range(20):
        records, _ = fetch(path, seed=seed)
        lol = next(r for r in records if r.source_id == "chitchat_prefs:x:1")
        assert lol.extra["rejected"] == "Beethoven, always."


def test_history_and_length_caps(dataset):
    records, source = fetch(dataset, history=1, max_chars=22)
    talk = [r for r in records if r.extra["conversation"] == "talk"]
    assert talk[2].extra["prompt"] == f"{H}fine thanks{A}"  # only the other's last turn
    assert talk[0].extra["chosen"] == "hello\nhow are you?"  # clipped at a word boundary
    assert all(len(r.extra["chosen"]) <= 22 and len(r.extra["rejected"]) <= 22 for r in records)
    assert source.stats["chosen clipped"] == len(records) - 3  # not talk's 3 short turns
    assert clip("abcdefghij", 4) == "abcd" and clip("ab cd ef", 6) == "ab cd"
    assert clip("ab cd ef", 5) == "ab cd" and clip("ab cd ef", 4) == "ab"


def test_the_draw_is_deterministic_given_the_seed(dataset):
    first, _ = fetch(dataset)
    assert fetch(dataset)[0] == first
    again = [r.extra["rejected_from"] for r in fetch(dataset, seed=1)[0]]
    assert again != [r.extra["rejected_from"] for r in first]


def test_bad_options_and_malformed_conversations_are_refused(dataset, tmp_path):
    with pytest.raises(ValueError, match="client_by"):
        fetch(dataset, client_by="listener")
    with pytest.raises(ValueError, match="rejected_before"):
        fetch(dataset, rejected_before="spring")
    with pytest.raises(ValueError, match="unknown option"):
        fetch(dataset, histroy=2)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"c1": {"messages": [[{"text": "hi"}]]}}))
    with pytest.raises(ValueError, match="c1"):
        fetch(path)


def test_the_recipe_builds_public_and_private_preference_parts(dataset, tmp_path):
    assert DATASETS.get("chitchat_prefs") is ChitchatPreferenceSource
    source = ChitchatPreferenceSource()
    overrides = {
        "source_options": {"path": str(dataset)},
        "validation_clients": 1,
        "test_clients": 2,
    }
    options = options_for(source, overrides)
    manifest = build_split(source, options, tmp_path / "split", cache_dir=tmp_path / "cache")
    split = load_split(tmp_path / "split")
    april = {r.extra["chosen"] for r in fetch(dataset)[0] if r.date < "2018-05-01"}
    clients = {}
    for part in ("train", "validation", "test", "public"):
        rows = split.records(part)
        assert rows, part
        for row in rows:
            assert row["prompt"].endswith(A) and row["chosen"] and row["rejected"]
            assert row["rejected"] in april  # no private reply reaches any part as rejected
            assert (row["date"] < "2018-05-01") == (part == "public")
        clients[part] = {row["client_id"] for row in rows}
    assert clients["public"] <= {"A", "B", "q0", "q1", "q2", "q3"}
    assert len(clients["validation"]) == 1 and len(clients["test"]) == 2
    assert not clients["train"] & (clients["validation"] | clients["test"])
    assert clients["train"] | clients["validation"] | clients["test"] == {
        "A",  # replies after midnight into May 1
        "B",
        *(f"p{i}" for i in range(6)),
    }
    assert manifest["filters"]["date_window"]["field"] == "reply timestamp"
    assert manifest["filters"]["source_stats"]["reply turns"] == 88
    rebuilt = build_split(source, options, tmp_path / "again", cache_dir=tmp_path / "cache2")
    assert rebuilt["content_hash"] == manifest["content_hash"]


def test_the_packaged_corpus():
    """The installed corpus, read once: the counts the module docstring states."""
    source = ChitchatPreferenceSource()
    records = list(source.fetch({}, None))
    assert len(records) == source.stats["reply turns"] == 131_548
    private = {r.client_id for r in records if r.date >= "2018-05-01"}
    assert len(private) == 861
    assert source.stats["rejected pool replies"] == 18_976
    assert source.stats["rejected from same topic"] > 0.98 * len(records)
    assert all(r.extra["rejected"] != r.extra["chosen"] for r in records)
