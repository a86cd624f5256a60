"""Paper 002 data hygiene and FL settings on local fixtures in the real formats.

* C4 (public) vs StackOverflow (private) overlap: c4 shards in the allenai/c4 json.gz schema,
  the TFF StackOverflow sqlite (serialized tf.train.Example rows) and a Stack Exchange dump
  ``Posts.xml``; :func:`stackoverflow_overlap` and the c4 builder's exclusions.
* the 256-examples-per-client cap and the sequence length: a StackOverflow split built from
  the TFF fixture with the source's recipe, fed to the FL client trainer.
"""

import gzip
import json

import pytest
from test_source_stackoverflow import tf_example, write_tff_sqlite

from benchmark import split_storage
from benchmark.federation.clients import ClientData, client_scope
from datasets_builders.contamination import (
    stackoverflow_overlap,
    stackoverflow_post,
    title_words,
    write_titles,
)
from datasets_builders.pipeline import build_split, options_for
from datasets_builders.sources.c4 import C4Source
from datasets_builders.sources.stackoverflow import StackOverflowSource
from methods.dp_ftrl import CROSS_DEVICE_002
from methods.fedlearn import FEDERATED_DEFAULTS, ClientTrainer, LocalTraining

MEDIAN = "function to calculate median in sql server"  # TFF-style titles (pre-processed)
VB = "iterator pattern in vb . net ( c # would use yield ! )"
ROUNDED = "creating rounded corners using css"


def make_tff_sqlite(path, rows):
    """A TFF dump of ``rows`` (split, client, tokens, type, question title)."""
    examples = [
        (split, client, tf_example(
            creation_date="2015-03-02 10:00:00.1 UTC" if split != "test" else "2018-05-01 UTC",
            score=3,
            tags="sql|median",
            title=title,
            tokens=tokens,
            type=kind,
        ))
        for split, client, tokens, kind, title in rows
    ]  # fmt: skip
    return write_tff_sqlite(path, examples)


SO_ROWS = [
    ("train", "00000101", "if you're using sql 2005 or better this is nice .", "answer", MEDIAN),
    ("train", "00000101", "edit :", "answer", VB),
    ("train", "00000205", "css3 does finally define the", "question", ROUNDED),
    ("heldout", "00000110", "thanks .", "answer", MEDIAN),
]

NEWS = "The city council met on Tuesday to discuss the new budget for schools and roads."
C4_DOCS = [
    # realnewslike-like pages: no overlap
    ("https://www.example-news.com/2019/04/budget", NEWS),
    ("https://www.example-news.com/2019/04/sql", "Engineers love sql server for reporting."),
    # the Stack Overflow page of a private question: the slug is the private title
    (
        "https://stackoverflow.com/questions/1342898/function-to-calculate-median-in-sql-server",
        "Function to Calculate Median in SQL Server\nIf you're using SQL 2005 or better",
    ),
    # a cut slug (>= 60 characters) of a long private title
    (
        "https://stackoverflow.com/questions/4/"
        "how-do-i-convert-a-string-into-an-integer-in-java-without-using-any-of-the",
        "A question about Java.",
    ),
    # a Stack Overflow page of some other question, and another network site: candidates
    ("https://stackoverflow.com/questions/11227809/why-is-processing-faster", "Branches."),
    ("https://math.stackexchange.com/questions/12/median-proof", "A proof about medians."),
    # a copy of a private question elsewhere: its title (punctuation differs) in the text
    (
        "https://www.example-news.com/tech/iterators",
        "Readers asked: Iterator pattern in VB.NET (C# would use yield!) - here is how.",
    ),
    # a private title of fewer than 6 words is not looked for in texts
    ("https://www.example-news.com/design", "Creating rounded corners using CSS is easy."),
]
LONG_TITLE = (
    "how do i convert a string into an integer in java without using any of the library functions"
)


def write_c4(tmp_path, docs=C4_DOCS):
    path = tmp_path / "c4-train.00000-of-00512.json.gz"
    with gzip.open(path, "wt") as fh:
        for url, text in docs:
            fh.write(json.dumps({"text": text, "timestamp": "2019-04-25T12:57:54Z", "url": url}))
            fh.write("\n")
    return str(path)


def public_options(files, **more):
    return {
        "subset": "public",
        "files": files,
        "buffer_size": 0,
        "max_samples": 1000,
        "public_min_words": 1,
        "config": "realnewslike",
        **more,
    }


def tff_records(tmp_path, rows=SO_ROWS):
    sqlite_path = make_tff_sqlite(tmp_path / "stackoverflow.sqlite", rows)
    return list(StackOverflowSource().fetch({"path": str(sqlite_path)}, tmp_path / "so-cache"))


def c4_records(tmp_path, docs=C4_DOCS, **more):
    source = C4Source()
    records = list(source.fetch(public_options(write_c4(tmp_path, docs), **more), tmp_path / "c"))
    return records, source.stats


# -- normalisation and URLs -------------------------------------------------------------


def test_title_words_bridge_tff_titles_url_slugs_and_web_text():
    tff = title_words(VB)
    assert tff == title_words("iterator-pattern-in-vb-net-c-would-use-yield")
    assert tff == title_words("Iterator pattern in VB.NET (C# would use yield!)")
    assert title_words("What’s a café? You're") == ("whats", "a", "cafe", "youre")


def test_stackoverflow_post_urls():
    question = stackoverflow_post("https://stackoverflow.com/questions/11227809/why-is-x?rq=1")
    assert question.post_ids == {11227809} and question.slug == "why-is-x"
    answer = stackoverflow_post("https://www.stackoverflow.com/questions/7/slug/42")
    assert answer.post_ids == {7, 42} and answer.slug == "slug"
    assert stackoverflow_post("https://stackoverflow.com/questions/7/slug#43").post_ids == {7, 43}
    assert stackoverflow_post("https://stackoverflow.com/a/99/1234").post_ids == {99}
    assert stackoverflow_post("https://stackoverflow.com/q/5").slug is None
    assert stackoverflow_post("https://stackoverflow.com/questions/tagged/python") is None
    assert stackoverflow_post("https://ru.stackoverflow.com/questions/5/x") is None  # own ids
    assert stackoverflow_post("https://math.stackexchange.com/questions/5/x") is None


# -- the overlap report on TFF records (no post ids) -----------------------------------


def test_tff_overlap_flags_pages_slugs_and_titles_in_text(tmp_path):
    private = tff_records(
        tmp_path, [*SO_ROWS, ("train", "00000300", "x y", "question", LONG_TITLE)]
    )
    assert {r.source_id.split(":")[0] for r in private} == {"tff-so"}  # no post ids in TFF
    public, _ = c4_records(tmp_path)
    report = stackoverflow_overlap(public, private)
    so_median = C4_DOCS[2][0]
    assert report.public_records == len(public) and report.private_records == 5
    assert report.private_post_ids == 0 and report.private_titles == 4
    assert report.site_candidates == [
        f"{so_median}#L0",
        f"{so_median}#L1",
        f"{C4_DOCS[3][0]}#L0",
        f"{C4_DOCS[4][0]}#L0",
        f"{C4_DOCS[5][0]}#L0",
    ]
    assert report.id_matches == []
    assert report.slug_matches == [
        (f"{so_median}#L0", MEDIAN),
        (f"{so_median}#L1", MEDIAN),
        (f"{C4_DOCS[3][0]}#L0", LONG_TITLE),
    ]
    assert report.text_matches == [
        (f"{so_median}#L0", MEDIAN),  # the page's own title line
        (f"{C4_DOCS[6][0]}#L0", VB),
    ]
    assert report.status == "overlap"
    checks = report.checks()
    assert checks["post_id"].startswith("not checked") and "TFF" in checks["post_id"]
    assert checks["url_slug"].startswith("checked") and checks["title_in_text"].startswith(
        "checked"
    )
    summary = report.as_dict()
    assert summary["counts"] == {
        "site_candidates": 5,
        "id_matches": 0,
        "slug_matches": 3,
        "text_matches": 2,
        "flagged": 6,
    }
    json.dumps(summary)  # serialisable as a hygiene record


def test_realnewslike_without_stackoverflow_pages_is_clean(tmp_path):
    """Paper 002's outcome: no public record matches the private data."""
    public, _ = c4_records(tmp_path, [C4_DOCS[0], C4_DOCS[1], C4_DOCS[7]])
    report = stackoverflow_overlap(public, tff_records(tmp_path))
    assert report.status == "clean" and report.flagged == set() and report.public_records == 3


def test_only_unmatched_stackexchange_pages_are_candidates(tmp_path):
    public, _ = c4_records(tmp_path, [C4_DOCS[0], C4_DOCS[4], C4_DOCS[5]])
    report = stackoverflow_overlap(public, tff_records(tmp_path))
    assert report.status == "candidates" and report.matched == set()
    assert len(report.site_candidates) == 2


# -- the paper's id check, on Stack Exchange dump records (they carry post ids) ----------

POSTS = """<?xml version="1.0" encoding="utf-8"?>
<posts>
  <row Id="1342898" PostTypeId="1" CreationDate="2009-08-27T17:00:00.000" OwnerUserId="9"
       Score="172" Title="Function to Calculate Median in SQL Server" Body="&lt;p&gt;How?&lt;/p&gt;"
       Tags="&lt;sql&gt;" />
  <row Id="1342999" PostTypeId="2" ParentId="1342898" CreationDate="2009-08-28T10:00:00.000"
       OwnerUserId="11" Score="3" Body="&lt;p&gt;Use PERCENTILE_CONT.&lt;/p&gt;" />
</posts>
"""


def test_dump_records_get_the_papers_post_id_check(tmp_path):
    path = tmp_path / "Posts.xml"
    path.write_text(POSTS)
    private = list(
        StackOverflowSource().fetch({"format": "stackexchange_xml", "path": str(path)}, tmp_path)
    )
    assert private[1].extra["parent_id"] == 1342898
    docs = [
        ("https://stackoverflow.com/a/1342999/11", "Use PERCENTILE_CONT."),  # the answer
        ("https://stackoverflow.com/questions/1342898/renamed-slug", "How?"),  # the question
        ("https://stackoverflow.com/q/77", "Another question."),
        C4_DOCS[0],
    ]
    public, _ = c4_records(tmp_path, docs)
    report = stackoverflow_overlap(public, private)
    assert report.private_post_ids == 2
    assert report.id_matches == [(f"{docs[0][0]}#L0", 1342999), (f"{docs[1][0]}#L0", 1342898)]
    assert report.slug_matches == [] and report.status == "overlap"
    assert report.checks()["post_id"].startswith("checked")
    assert f"{docs[2][0]}#L0" in report.site_candidates


# -- the c4 builder drops flagged public records ------------------------------------------


def test_c4_public_build_excludes_sites_and_private_titles(tmp_path):
    private = tff_records(
        tmp_path, [*SO_ROWS, ("train", "00000300", "x y", "question", LONG_TITLE)]
    )
    titles = tmp_path / "so-titles.txt.gz"
    assert write_titles(private, titles) == 4

    kept, stats = c4_records(
        tmp_path, exclude_sites="stackoverflow.com,stackexchange.com", exclude_titles=str(titles)
    )
    assert stats["skipped: excluded site"] == 4  # the four Stack Exchange pages
    assert stats["skipped: line contains a private title"] == 1  # the VB.NET copy
    assert stackoverflow_overlap(kept, private).status == "clean"
    assert {r.text for r in kept} == {NEWS, C4_DOCS[1][1], C4_DOCS[7][1]}

    # titles alone: pages of private questions go (by slug), other Stack Exchange pages stay
    kept, stats = c4_records(tmp_path, exclude_titles=str(titles))
    assert stats["skipped: page of a private question (url slug)"] == 2
    report = stackoverflow_overlap(kept, private)
    assert report.status == "candidates" and len(report.site_candidates) == 2


def test_title_file_content_is_part_of_the_c4_revision(tmp_path):
    titles = tmp_path / "titles.txt"
    files = write_c4(tmp_path)
    titles.write_text(MEDIAN + "\n")
    first = C4Source().revision(public_options(files, exclude_titles=str(titles)))
    titles.write_text(VB + "\n")
    second = C4Source().revision(public_options(files, exclude_titles=str(titles)))
    assert "exclude_titles=" in first and first != second


def test_built_splits_can_be_checked_and_are_clean_with_the_exclusions(tmp_path):
    so = StackOverflowSource()
    so_path = make_tff_sqlite(tmp_path / "so.sqlite", SO_ROWS)
    so_options = options_for(so, {"source_options": {"path": str(so_path)}})
    build_split(so, so_options, tmp_path / "so-split", cache_dir=tmp_path / "cache-so")
    private_rows = [
        r for rows in split_storage.read_parts(tmp_path / "so-split").values() for r in rows
    ]
    titles = tmp_path / "titles.txt"
    write_titles(private_rows, titles)

    def public_rows(name, **more):
        c4 = C4Source()
        # a public-only split: every record is pinned to "public", so nothing is partitioned
        overrides = {"partition": "natural", "validation_clients": 0, "test_clients": 0}
        overrides["source_options"] = public_options(write_c4(tmp_path), **more)
        opts = options_for(c4, overrides)
        build_split(c4, opts, tmp_path / name, cache_dir=tmp_path / f"cache-{name}")
        return split_storage.read_parts(tmp_path / name)["public"]

    raw = stackoverflow_overlap(public_rows("c4-raw"), private_rows)
    assert raw.status == "overlap" and raw.slug_matches and raw.text_matches
    cleaned = public_rows(
        "c4-clean", exclude_sites="stackoverflow.com,stackexchange.com", exclude_titles=str(titles)
    )
    report = stackoverflow_overlap(cleaned, private_rows)
    assert report.status == "clean" and report.public_records == 3


# -- the 256-example cap and the sequence length ------------------------------------------


class WordTokenizer:
    """A word-level tokenizer with the call signature ``encode`` uses (TFF counts words)."""

    def __init__(self):
        self.vocab = {}

    def __call__(self, texts, add_special_tokens=False, truncation=False, max_length=None):
        ids = [[self.vocab.setdefault(w, len(self.vocab)) for w in t.split()] for t in texts]
        return {"input_ids": [i[:max_length] if truncation else i for i in ids]}


@pytest.fixture
def big_client_split(tmp_path):
    """TFF fixture: client 00000101 has 300 training sentences (rowid order s0..s299), the
    first one 30 words long; built with the stackoverflow source's own recipe."""
    long_first = " ".join(["s0", *(f"w{i}" for i in range(29))])
    rows = [("train", "00000101", long_first, "answer", MEDIAN)]
    rows += [
        ("train", "00000101", f"s{i} is a sentence .", "answer", MEDIAN) for i in range(1, 300)
    ]
    rows += [("train", "00000205", "css3 does finally define the", "question", ROUNDED)]
    rows += [("test", "00000101", "later post .", "question", VB)]
    path = make_tff_sqlite(tmp_path / "so.sqlite", rows)
    source = StackOverflowSource()
    options = options_for(source, {"source_options": {"path": str(path)}})
    manifest = build_split(source, options, tmp_path / "split", cache_dir=tmp_path / "cache")
    return manifest, split_storage.read_parts(tmp_path / "split")


def test_split_keeps_whole_sentences_and_all_examples(big_client_split):
    """The builder neither caps nor chunks: a TFF example (one sentence) is one sample, and
    the test part stays whole (paper 002 evaluates on all 16.5M test examples)."""
    manifest, parts = big_client_split
    assert manifest["cap"]["max_samples_per_client"] is None
    assert manifest["chunking"]["span_length"] is None
    texts = [r["text"] for r in parts["train"] if r["client_id"] == "00000101"]
    assert len(texts) == 300
    assert [t.split()[0] for t in texts] == [f"s{i}" for i in range(300)]  # rowid order
    assert [r["text"] for r in parts["test"]] == ["later post ."]


def test_fl_client_uses_its_first_256_examples_truncated_to_the_sequence_length(
    big_client_split,
):
    _, parts = big_client_split
    rows = [r for r in parts["train"] if r["client_id"] == "00000101"]
    config = {**FEDERATED_DEFAULTS, **CROSS_DEVICE_002}
    cfg = LocalTraining.from_config(config)
    assert cfg.max_samples == 256 and cfg.batch_size == 16 and cfg.epochs == 1

    def sequences(cfg):
        tokenizer = WordTokenizer()
        with client_scope():
            seqs = ClientTrainer(None, tokenizer, cfg)._sequences(ClientData(rows, {}))
        names = {i: w for w, i in tokenizer.vocab.items()}
        return [[names[i] for i in s] for s in seqs]

    capped = sequences(cfg)
    assert len(capped) == 256
    assert [s[0] for s in capped] == [f"s{i}" for i in range(256)]  # the first 256, in order
    assert len(capped[0]) == min(30, cfg.max_length)

    seq20 = sequences(LocalTraining(cfg.epochs, cfg.batch_size, cfg.lr, 20, cfg.max_samples))
    assert len(seq20) == 256 and max(len(s) for s in seq20) == 20
    assert seq20[0] == ["s0", *(f"w{i}" for i in range(19))]  # TFF: the first 20 words
