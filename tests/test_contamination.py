"""Contamination verdicts from knowledge cut-offs and split date windows."""

from __future__ import annotations

import pytest

from benchmark.model_cutoffs import MODELS, check, lookup
from benchmark.records import contamination, release_writer


def manifest(start=None, demo=False, private_min=None) -> dict:
    counts = {"train": {"dates": {"min": private_min, "max": "2024-12-31"}} if private_min else {}}
    return {
        "demo": demo,
        "source": {"name": "congress", "demo": demo},
        "filters": {"date_window": {"start": start, "end": None}},
        "counts": counts,
    }


def test_window_after_the_cutoff_month_is_clean_and_the_edge_is_not():
    assert check(manifest("2023-04-01"), "llama-3-8b").status == "clean"
    edge = check(manifest("2023-03-31"), "llama-3-8b")
    assert edge.status == "contaminated" and "2023-03" in edge.reason
    assert check(manifest("2022-10-01"), "llama-2-7b").status == "clean"
    assert check(manifest("2022-10-01"), "llama-2-7b-chat").status == "contaminated"


def test_demo_corpora_are_always_contaminated():
    verdict = check(manifest("2030-01-01", demo=True), "gpt2")
    assert verdict.status == "contaminated" and "demo corpus" in verdict.reason
    # A model with no registered cut-off has seen a demo corpus too; off a demo corpus it
    # has no verdict (the record says "unknown").
    unregistered = contamination(manifest("2030-01-01", demo=True), "acme/lm-7b rev1")
    assert (unregistered["model"], unregistered["verdict"]) == ("acme/lm-7b", "contaminated")
    assert contamination(manifest("2030-01-01"), "acme/lm-7b")["verdict"] == "unknown"
    assert check(manifest(demo=True), "GPT2").model == "gpt2"  # registered name, any case


def test_without_a_window_the_oldest_private_date_decides():
    assert check(manifest(private_min="2025-01-02"), "smollm2-135m-instruct").status == "clean"
    late = check(manifest(private_min="2024-11-30"), "smollm2-135m-instruct")
    assert late.status == "contaminated" and "release bound" in late.reason
    unknown = check(manifest(), "gpt2")
    assert unknown.status == "unknown" and "no date" in unknown.reason


def test_a_private_record_older_than_the_window_decides():
    """A source may pin a record to a private part though it predates the window (e.g.
    stackoverflow's TFF train rows): the oldest private date is compared, not the window."""
    verdict = check(manifest("2024-01-01", private_min="2020-06-01"), "llama-3-8b")
    assert verdict.status == "contaminated" and "oldest private record 2020-06-01" in verdict.reason
    assert check(manifest("2024-01-01", private_min="2024-02-01"), "llama-3-8b").reason == (
        "window start 2024-01-01 is after the cut-off 2023-03 (documented)"
    )


def test_undated_private_records_leave_the_verdict_unknown(tmp_path):
    """The oldest dated record says nothing of the undated ones (9 of 10 here)."""
    from toy_source import ToySource

    from datasets_builders.pipeline import SplitOptions, build_split
    from datasets_builders.source import SourceRecord

    records = [SourceRecord(f"text {i}", f"r{i}", client_id=f"u{i}") for i in range(9)]
    records.append(SourceRecord("text 9", "r9", client_id="u9", date="2024-06-01"))
    options = SplitOptions(span_length=None, validation_clients=0, test_clients=0)
    manifest = build_split(ToySource(records), options, tmp_path / "s", cache_dir=tmp_path / "c")
    assert manifest["counts"]["train"]["undated"] == 9
    verdict = check(manifest, "llama-3-8b")
    assert verdict.status == "unknown" and "9 private records have no date" in verdict.reason


def test_every_hub_model_the_paper_profile_loads_has_a_cut_off():
    from benchmark.profiles import new_profile

    described = new_profile("paper").describe()
    roles = ("generator", "ondevice_lm", "conditional_lm", "public_llm", "masked_filler")
    roles += ("embedder", "preference_embedder", "preference_generator", "preference_policy")
    for role in roles:
        lookup(described[role].split(" ")[0])  # KeyError names an unregistered one


def test_registry_names_aliases_and_unknown_models():
    assert lookup("Meta-Llama/Meta-Llama-3-8B").name == "llama-3-8b"
    assert lookup("distilgpt2").cutoff == "2019-10"
    assert lookup("all-MiniLM-L6-v2").kind == "release_bound"
    assert {m.name for m in MODELS} >= {"llama-3-8b", "llama-2-7b", "smollm2-135m-instruct", "gpt2"}
    assert all(m.cutoff_end[:7] == m.cutoff for m in MODELS)
    with pytest.raises(KeyError, match="no knowledge cut-off registered"):
        lookup("gpt-17")


def test_a_preference_release_is_checked_against_the_model_that_wrote_it():
    """A split dated after Llama-2's pretraining cut-off but inside its chat tuning data:
    texts from the base model are clean, pairs written by the chat model are not."""
    models = {
        "generator": "meta-llama/Llama-2-7b-hf",
        "preference_generator": "meta-llama/Llama-2-7b-chat-hf",
    }
    split = manifest("2022-10-01")
    texts = contamination(split, release_writer(models, "texts"))
    pairs = contamination(split, release_writer(models, "preferences"))
    assert (texts["model"], texts["verdict"]) == ("llama-2-7b", "clean")
    assert (pairs["model"], pairs["verdict"]) == ("llama-2-7b-chat", "contaminated")
    assert release_writer({"generator": "gpt2"}, "preferences") == "gpt2"  # no separate writer
