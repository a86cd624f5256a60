"""Preference sources on local files in the hub schemas (OASST1, HH-RLHF, TL;DR, prompts)."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from datasets_builders.sources.preferences import (
    HHRLHFSource,
    OASST1Source,
    PublicPromptsSource,
    TLDRSource,
    split_dialogue,
)


def message(mid, parent, role, text, rank=None, user="u", lang="en", deleted=False):
    return {
        "message_id": mid,
        "parent_id": parent,
        "user_id": user,
        "created_date": f"2023-02-0{len(mid) % 9 + 1}T10:00:00.000000+00:00",
        "text": text,
        "role": role,
        "lang": lang,
        "deleted": deleted,
        "rank": rank,
        "message_tree_id": "t1",
    }


def oasst_tree(prefix=""):
    p = prefix
    return [
        message(f"{p}q", None, "prompter", "What is DP?", user=f"{p}asker"),
        message(f"{p}a0", f"{p}q", "assistant", "Differential privacy bounds leakage.", 0, "r0"),
        message(f"{p}a1", f"{p}q", "assistant", "A database.", 1, "r1"),
        message(f"{p}a2", f"{p}q", "assistant", "No idea.", 2, "r2"),
        message(f"{p}a3", f"{p}q", "assistant", "Deleted answer.", 3, "r3", deleted=True),
        message(f"{p}a4", f"{p}q", "assistant", "Rank four, no rank three.", 4, "r4"),
        message(f"{p}f", f"{p}a0", "prompter", "Give an example.", user=f"{p}asker"),
        message(f"{p}b0", f"{p}f", "assistant", "Counting queries with noise.", 0, "r5"),
        message(f"{p}b1", f"{p}f", "assistant", "Cats.", 1, "r6"),
        message(f"{p}b2", f"{p}f", "assistant", "Unranked.", None, "r7"),
        message(f"{p}x", None, "prompter", "Was ist DP?", lang="de"),
    ]


def write_parquet(path, rows):
    pq.write_table(pa.Table.from_pylist(rows), path)
    return str(path)


def write_jsonl(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows))
    return str(path)


def test_oasst1_sibling_rank_pairs_paths_clients_test_and_public(tmp_path):
    train = write_parquet(tmp_path / "train.parquet", oasst_tree())
    test = write_parquet(tmp_path / "validation.parquet", oasst_tree("v") + oasst_tree("w"))
    alpaca = write_jsonl(
        tmp_path / "alpaca.jsonl",
        [
            {"instruction": "Name a colour.", "input": "", "output": "Red"},
            {"instruction": "Translate", "input": "bonjour", "output": "hello"},
            {"instruction": "", "input": "", "output": "x"},
        ],
    )
    source = OASST1Source()
    options = {"files": train, "test_files": test, "test_samples": 3, "public_files": alpaca}
    records = list(source.fetch(options, tmp_path / "cache"))
    train_records = [r for r in records if "part" not in r.extra]
    ids = [r.source_id for r in train_records]
    assert ids == ["oasst1:b0>b1", "oasst1:a0>a1", "oasst1:a1>a2"]  # by parent message id
    first = train_records[1]
    assert first.extra["prompt"] == "\n\nHuman: What is DP?\n\nAssistant: "
    assert first.extra["chosen"] == "Differential privacy bounds leakage."
    assert first.extra["rejected"] == "A database."
    assert first.text == first.extra["prompt"] + first.extra["chosen"]
    assert first.client_id == "asker" and first.licence == "apache-2.0"
    assert first.date == "2023-02-02"  # its prompt's day: the replies came a day later
    deep = train_records[0]
    assert deep.extra["prompt"] == (
        "\n\nHuman: What is DP?\n\nAssistant: Differential privacy bounds leakage."
        "\n\nHuman: Give an example.\n\nAssistant: "
    )
    assert source.stats["skipped: no sibling of rank r-1"] == 3  # rank 4 alone, in 3 trees
    test_records = [r for r in records if r.extra.get("part") == "test"]
    assert len(test_records) == 3 and source.stats["test tuples available"] == 6
    public = [r for r in records if r.extra.get("part") == "public"]
    assert [r.text for r in public] == ["Name a colour.", "Translate bonjour"]
    assert public[1].extra["prompt"] == "\n\nHuman: Translate bonjour\n\nAssistant: "
    assert source.stats["malformed: empty prompt"] == 1
    again = list(OASST1Source().fetch(options, tmp_path / "cache"))
    assert again == records  # the test sample is seeded
    other = list(OASST1Source().fetch({**options, "seed": 5}, tmp_path / "cache"))
    assert {r.source_id for r in other if r.extra.get("part") == "test"} != {
        r.source_id for r in test_records
    }


def test_oasst1_responder_clients(tmp_path):
    train = write_parquet(tmp_path / "train.parquet", oasst_tree())
    options = {"files": train, "test_samples": 0, "public": "none", "client_by": "responder"}
    records = list(OASST1Source().fetch(options, tmp_path))
    assert [r.client_id for r in records] == ["r6", "r1", "r2"]


HISTORY = "\n\nHuman: Hi\n\nAssistant: Hello!\n\nHuman: Tell a joke\n\nAssistant:"
HH = [
    {"chosen": f"{HISTORY} Knock knock.", "rejected": f"{HISTORY} No."},
    {"chosen": "no assistant turn", "rejected": "x"},
]


def test_hh_rlhf_prompt_is_the_history_up_to_the_last_assistant_turn(tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", HH)
    test = write_jsonl(tmp_path / "test.jsonl", HH[:1] * 4)
    prompts = write_parquet(tmp_path / "pku.parquet", [{"prompt": "How do I pick a lock?"}])
    source = HHRLHFSource()
    options = {"files": train, "test_files": test, "test_samples": 2, "public_files": prompts}
    records = list(source.fetch(options, tmp_path / "c"))
    (pair,) = [r for r in records if "part" not in r.extra]
    assert (
        pair.extra["prompt"]
        == "\n\nHuman: Hi\n\nAssistant: Hello!\n\nHuman: Tell a joke\n\nAssistant: "
    )
    assert (pair.extra["chosen"], pair.extra["rejected"]) == ("Knock knock.", "No.")
    assert pair.client_id is None and pair.date is None
    test_ids = [r.source_id for r in records if r.extra.get("part") == "test"]
    assert len(test_ids) == 2 and test_ids == sorted(test_ids)  # seeded sample, file order
    assert source.stats["malformed: no Assistant turn"] == 1
    (public,) = [r for r in records if r.extra.get("part") == "public"]
    assert public.extra["prompt"] == "\n\nHuman: How do I pick a lock?\n\nAssistant: "
    assert split_dialogue("plain text") is None


def tldr_row(post, choice, worker="w1"):
    return {
        "info": {"id": "t3_abc", "post": post, "title": "T", "subreddit": "relationships"},
        "summaries": [
            {"text": " Summary A", "policy": "ref"},
            {"text": "Summary B", "policy": "sup"},
        ],
        "choice": choice,
        "worker": worker,
        "batch": "batch3",
        "split": "train",
    }


def test_tldr_comparisons_skip_cnn_dm_and_use_workers_as_clients(tmp_path):
    train = write_jsonl(
        tmp_path / "batch3.json", [tldr_row("My post.", 1), tldr_row(None, 0), tldr_row("P", 7)]
    )
    xsum = write_jsonl(
        tmp_path / "xsum.jsonl", [{"id": "3897", "document": "BBC text.", "summary": "s"}]
    )
    source = TLDRSource()
    options = {"files": train, "test_samples": 0, "public_files": xsum}
    records = list(source.fetch(options, tmp_path / "c"))
    pair, public = records
    assert pair.extra["prompt"] == "My post.\n\nSummary: "
    assert (pair.extra["chosen"], pair.extra["rejected"]) == ("Summary B", "Summary A")
    assert pair.client_id == "w1" and pair.label == "relationships"
    assert source.stats["skipped: no Reddit post (CNN/DM article)"] == 1
    assert source.stats["malformed: bad summaries or choice"] == 1
    assert public.source_id == "xsum:3897"
    assert public.extra["prompt"] == (
        "\n\nSummarize the following article in a paragraph of 50 words or less: "
        "BBC text.\n\nSummary: "
    )


def test_public_prompts_source_and_options(tmp_path):
    path = write_jsonl(
        tmp_path / "x.jsonl", [{"id": str(i), "document": f"Doc {i}."} for i in range(5)]
    )
    source = PublicPromptsSource()
    opts = {"set": "xsum", "files": path, "max_prompts": 3, "template": "paper"}
    records = list(source.fetch(opts, tmp_path / "c"))
    assert [r.source_id for r in records] == ["xsum:0", "xsum:1", "xsum:2"]
    assert all(r.extra["part"] == "public" for r in records)
    assert records[0].extra["prompt"].endswith("Doc 0.\n\nAssistant: ")
    assert source.revision(opts).startswith("local-files:1:")
    with pytest.raises(ValueError, match="set must be one of"):
        list(PublicPromptsSource().fetch({"set": "dolly"}, tmp_path))


def test_revision_names_hub_repos_and_sampling():
    revision = OASST1Source().revision({"revision": "abc"})
    assert "OpenAssistant/oasst1@abc" in revision and "vicgalle/alpaca-gpt4@main" in revision
    assert revision.endswith("test_samples=712 seed=0")
    assert "refs/convert/parquet" in TLDRSource().revision({})
