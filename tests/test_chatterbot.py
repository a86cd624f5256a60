"""The bundled chatterbot corpora: dialogues with control codes and the offline preference set."""

from __future__ import annotations

from collections import Counter

from benchmark.split_storage import load_split
from datasets_builders.pipeline import build_split, options_for
from datasets_builders.sources.chatterbot import (
    ChatterbotPreferenceSource,
    ChatterbotSource,
    load_dialogues,
)


def test_dialogues_carry_their_category_as_label():
    records = list(ChatterbotSource().fetch({}, None))
    assert len(records) == len(load_dialogues()) == 2026
    labels = Counter(r.label for r in records)
    assert len(labels) == 21 and labels["tech_support"] == 1050
    ai = next(r for r in records if r.source_id == "chatterbot:ai:0")
    assert ai.text.split("\n")[0] == "What is AI?" and ai.client_id is None


def test_preference_tuples_pair_the_real_reply_with_a_mismatched_one():
    records = list(ChatterbotPreferenceSource().fetch({}, None))
    by_id = {d.source_id: d for d in load_dialogues()}
    assert len(records) == sum(len(d.turns) >= 2 for d in by_id.values())
    for record in records:
        mine, other = by_id[record.source_id], by_id[record.extra["rejected_from"]]
        assert record.text == record.extra["prompt"] == mine.turns[0]
        assert record.extra["chosen"] == mine.turns[1]
        assert record.extra["rejected"] == other.turns[1]
        assert other.category != mine.category and other.turns[0] != mine.turns[0]


def test_preference_draw_is_seeded():
    def rejected(seed: int) -> list[str]:
        source = ChatterbotPreferenceSource()
        return [r.extra["rejected_from"] for r in source.fetch({"seed": seed}, None)]

    assert rejected(0) == rejected(0)
    assert rejected(0) != rejected(1)


def test_recipes_build_splits_with_their_columns(tmp_path):
    prefs = ChatterbotPreferenceSource()
    build_split(prefs, options_for(prefs), tmp_path / "prefs", cache_dir=tmp_path / "c1")
    split = load_split(tmp_path / "prefs")
    row = split.records("train")[0]
    assert {"prompt", "chosen", "rejected", "rejected_from"} <= set(row)
    assert row["client_id"] == row["source_id"]  # one preference tuple per client
    prompts = Counter(r["prompt"] for r in split.records("train"))
    assert prompts.most_common(1)[0][1] > 1  # same prompt, different tuples, all kept

    dialogues = ChatterbotSource()
    manifest = build_split(
        dialogues, options_for(dialogues), tmp_path / "chat", cache_dir=tmp_path / "c2"
    )
    assert manifest["partition"]["rule"] == "dirichlet"
    assert manifest["counts"]["documents"] == 2026 - manifest["filters"]["dropped"]["duplicate"]
    clients = manifest["counts"]["train"]["clients"] + manifest["counts"]["test"]["clients"]
    assert clients + manifest["counts"]["validation"]["clients"] == 100
