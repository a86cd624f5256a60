"""StackOverflow source: the TFF sqlite (downloaded from a local server) and the XML dump."""

import lzma
import sqlite3
import struct

import pytest
from http_fixture import FixtureServer, Reply

from datasets_builders.sources.stackoverflow import StackOverflowSource, parse_tf_example


def _varint(n):
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _len_field(number, payload):
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def tf_example(**features):
    """Serialize a tf.train.Example (bytes, int and float features), as TFF stores them."""
    entries = b""
    for key, value in features.items():
        if isinstance(value, bytes | str):
            raw = value.encode() if isinstance(value, str) else value
            feature = _len_field(1, _len_field(1, raw))
        elif isinstance(value, float):
            feature = _len_field(2, _len_field(1, struct.pack("<f", value)))
        else:
            feature = _len_field(3, _len_field(1, _varint(value)))
        entries += _len_field(1, _len_field(1, key.encode()) + _len_field(2, feature))
    return _len_field(1, entries)


ROWS = [
    ("train", "101", "how do i sort a list in python ?", "2015-03-02 10:00:00.1 UTC", "question"),
    ("train", "101", "use sorted ( ) .", "2015-03-03 11:00:00.1 UTC", "answer"),
    ("train", "205", "what is a pointer ?", "2016-07-01 09:00:00.1 UTC", "question"),
    ("heldout", "110", "segfault on free", "2014-01-01 00:00:00.1 UTC", "question"),
    ("test", "101", "python 3 dict order", "2018-02-01 00:00:00.1 UTC", "question"),
]


def write_tff_sqlite(path, examples):
    """The TFF layout: ``examples(split_name, client_id, serialized_example_proto)`` holding
    ``examples`` (split, client id, serialized proto), and an empty ``client_metadata``."""
    db = sqlite3.connect(path)
    db.execute(
        "CREATE TABLE examples (split_name TEXT NOT NULL, client_id TEXT NOT NULL, "
        "serialized_example_proto BLOB NOT NULL)"
    )
    db.execute(
        "CREATE TABLE client_metadata (client_id TEXT NOT NULL, split_name TEXT NOT NULL, "
        "num_examples INTEGER NOT NULL)"
    )
    db.executemany("INSERT INTO examples VALUES (?, ?, ?)", examples)
    db.commit()
    db.close()
    return path


def make_sqlite(path, rows=ROWS, broken=False):
    examples = [
        (split, client, tf_example(
            tokens=tokens, creation_date=date, type=kind, title="t", tags="python|list", score=-3
        ))
        for split, client, tokens, date, kind in rows
    ]  # fmt: skip
    if broken:
        examples.append(("train", "300", b"\x0a\xff"))
    return write_tff_sqlite(path, examples)


def test_tf_example_decoding_handles_bytes_ints_floats_and_negatives():
    data = tf_example(tokens="a b", score=-3, ratio=0.5, n=300)
    parsed = parse_tf_example(data)
    assert parsed == {"tokens": [b"a b"], "score": [-3], "ratio": [0.5], "n": [300]}


def test_tff_sqlite_downloaded_decompressed_and_pinned_to_parts(tmp_path):
    sqlite_path = make_sqlite(tmp_path / "so.sqlite", broken=True)
    payload = lzma.compress(sqlite_path.read_bytes())
    cache = tmp_path / "cache"
    with FixtureServer() as server:
        server.add("/tff/stackoverflow.sqlite.lzma", Reply(payload))
        source = StackOverflowSource()
        options = {"url": f"{server.url}/tff/stackoverflow.sqlite.lzma", "backoff": 0.01}
        records = list(source.fetch(options, cache))
        again = list(StackOverflowSource().fetch(options, cache))
        assert len(server.hits) == 1 and again == records  # resumed from the cache
    assert [(r.client_id, r.extra["part"]) for r in records] == [
        ("110", "validation"),
        ("101", "test"),
        ("101", "train"),
        ("101", "train"),
        ("205", "train"),
    ]
    first = records[2]
    assert first.text == "how do i sort a list in python ?" and first.date == "2015-03-02"
    assert first.label == "question" and first.extra["score"] == -3
    assert first.extra["tags"] == "python|list" and first.licence == "cc-by-sa"
    assert source.stats["malformed: bad tf.Example (truncated varint)"] == 1


def test_code_recipe_options(tmp_path):
    path = make_sqlite(tmp_path / "so.sqlite")
    options = {"path": str(path), "splits": "train", "pin_parts": "false", "max_users": "1"}
    records = list(StackOverflowSource().fetch(options, tmp_path / "c"))
    assert {r.client_id for r in records} == {"101"}
    assert all("part" not in r.extra for r in records)


COMMENTS = """<?xml version="1.0" encoding="utf-8"?>
<comments>
  <row Id="1" PostId="7" Score="2" Text="Have you tried &lt;code&gt;sorted&lt;/code&gt;?"
       CreationDate="2017-05-01T10:00:00.000" UserId="42" />
  <row Id="2" PostId="7" Score="0" Text="Thanks, that works."
       CreationDate="2019-01-02T10:00:00.000" UserId="42" />
  <row Id="3" PostId="8" Score="0" Text="Deleted user comment" CreationDate="2017-01-01T00:00:00" />
  <row Id="4" PostId="9" Score="1" Text="Check the docs." CreationDate="2016-01-01T00:00:00"
       UserId="30" />
</comments>
"""


def test_stackexchange_comments_with_tff_rule(tmp_path):
    path = tmp_path / "Comments.xml"
    path.write_text(COMMENTS)
    source = StackOverflowSource()
    options = {"format": "stackexchange_xml", "path": str(path), "tff_rule": "true"}
    records = list(source.fetch(options, tmp_path / "c"))
    assert [(r.source_id, r.client_id, r.extra["part"]) for r in records] == [
        ("se-comment:1", "42", "train"),
        ("se-comment:2", "42", "test"),
        ("se-comment:4", "30", "validation"),
    ]
    assert records[0].text == "Have you tried <code>sorted</code>?"
    assert source.stats["skipped: no user id (deleted user)"] == 1


def test_stackexchange_posts_html_is_flattened(tmp_path):
    path = tmp_path / "Posts.xml"
    path.write_text(
        '<posts><row Id="5" PostTypeId="1" CreationDate="2012-01-01T00:00:00" '
        'OwnerUserId="9" Title="Sort?" Body="&lt;p&gt;How to sort?&lt;/p&gt;&lt;pre&gt;'
        'x.sort()&lt;/pre&gt;" /></posts>'
    )
    (record,) = StackOverflowSource().fetch(
        {"format": "stackexchange_xml", "path": str(path)}, tmp_path / "c"
    )
    assert record.text == "How to sort?\nx.sort()" and record.label == "question"


def test_xml_needs_a_path(tmp_path):
    with pytest.raises(ValueError, match="needs --option path"):
        list(StackOverflowSource().fetch({"format": "stackexchange_xml"}, tmp_path))
