"""StackOverflow questions, answers and comments with users as clients (papers 002 and 004).

Formats (``format``):

* ``tff_sqlite`` (default): TensorFlow Federated's federated StackOverflow, the classic
  split of Reddi et al. / Kairouz et al. used by paper 002. Public file
  ``https://storage.googleapis.com/tff-datasets-public/stackoverflow.sqlite.lzma``
  (downloaded resumably into the cache and decompressed there, or a local ``path`` to the
  ``.sqlite`` / ``.sqlite.lzma``). SQLite schema: table ``examples(split_name, client_id,
  serialized_example_proto)`` where each row is one serialized ``tf.train.Example`` with
  features ``tokens`` (the tokenised, lower-cased sentence), ``title``, ``tags``
  (``|``-separated), ``type`` (question/answer), ``creation_date``, ``score``; splits
  ``train`` (posts before 2018-01-01 of users with ``id % 10 != 0``), ``heldout`` (all
  posts of users with ``id % 10 == 0``) and ``test`` (posts from 2018-01-01 on). The
  protobufs are decoded here without TensorFlow (a small wire-format reader). A row
  carries no post, question or answer id (``title`` is the question's title, on answers
  too), so source ids are ``tff-so:<rowid>``; rows are read in ``rowid`` order within a
  client (the order TFF's ``SqlClientData`` reads them), so "a client's first N examples"
  is well defined.
* ``stackexchange_xml``: the Stack Exchange data dump (archive.org ``stackexchange``,
  ``stackoverflow.com-Comments.7z`` / ``-Posts.7z``, extracted to ``Comments.xml`` /
  ``Posts.xml``, optionally gzip/bzip2-compressed) given as ``path``: one ``<row>`` per
  comment (``Text``, ``UserId``, ``CreationDate``) or post (``Body`` HTML,
  ``OwnerUserId``, ``PostTypeId``, ``Title``, ``Tags``). With ``tff_rule`` the TFF split
  rule above is applied to it (``id % 10 == 0`` held out, 2018-01-01 date boundary).
  Source ids carry the post id (``se-post:<Id>``); ``parent_id`` (an answer's question)
  and ``post_id`` (the post a comment is on) are kept as extras.

Public-data hygiene (paper 002 compared C4 URLs with StackOverflow post ids):
:func:`datasets_builders.contamination.stackoverflow_overlap` runs that id check on the
dump's records and, on TFF records (no ids), matches the question titles against C4's
Stack Overflow URL slugs and texts instead.

Clients are users. With ``pin_parts`` the TFF split becomes the split's parts (train,
validation = heldout, test); without it the pipeline assigns held-out users itself.
``max_users`` keeps the first N users (in ``client_id`` order for TFF, in dump order for
XML), e.g. paper 004's CODE split: 1,250 training users + 100 evaluation users, at most 128
samples (comments) per user (the pipeline's ``cap``). Label: the post type.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import shutil
import sqlite3
import struct
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from datasets_builders.http import MalformedRecordError
from datasets_builders.source import Source, SourceRecord
from datasets_builders.sources._common import (
    NETWORK_OPTIONS,
    Option,
    RecordPolicy,
    html_to_text,
    make_client,
    parse_options,
)

TFF_URL = "https://storage.googleapis.com/tff-datasets-public/stackoverflow.sqlite.lzma"
TFF_PARTS = {"train": "train", "heldout": "validation", "test": "test"}
TEST_FROM = "2018-01-01"
LICENCE = "cc-by-sa"

OPTIONS = (
    Option("format", "tff_sqlite", "tff_sqlite or stackexchange_xml"),
    Option("path", None, "local .sqlite(.lzma) or Comments.xml/Posts.xml(.gz|.bz2)"),
    Option("url", TFF_URL, "download URL of the TFF sqlite.lzma (when no path)"),
    Option("splits", ["train", "heldout", "test"], "TFF splits read", "list"),
    Option("pin_parts", True, "TFF train/heldout/test become the parts", "bool"),
    Option("tff_rule", False, "apply the TFF split rule to stackexchange_xml", "bool"),
    Option("max_users", None, "keep only the first N users", "int"),
    *NETWORK_OPTIONS,
)


class StackOverflowSource(Source):
    name: ClassVar[str] = "stackoverflow"
    description: ClassVar[str] = (
        "StackOverflow posts/comments by user: TFF federated split (paper 002), CODE (paper 004)"
    )
    date_field: ClassVar[str | None] = "creation_date"
    client_words: ClassVar[str] = "one StackOverflow user"
    client_is_person: ClassVar[bool] = True
    options: ClassVar[tuple[Option, ...]] = OPTIONS
    split_defaults: ClassVar[dict[str, Any]] = {
        "partition": "natural",
        "span_length": None,
        "dedupe": "none",
        "validation_clients": 0,
        "test_clients": 0,
    }

    def __init__(self) -> None:
        self.stats: Counter[str] = Counter()

    def revision(self, options: dict[str, Any]) -> str:
        opts = parse_options(options, OPTIONS, self.name)
        where = opts["path"] or opts["url"]
        return f"{opts['format']}:{Path(where).name}"

    def fetch(self, options: dict[str, Any], cache_dir: Path) -> Iterator[SourceRecord]:
        opts = parse_options(options, OPTIONS, self.name)
        self.stats = Counter()
        policy = RecordPolicy(self.name, opts["on_malformed"], self.stats)
        if opts["format"] == "tff_sqlite":
            records = self._tff(self._sqlite_path(opts, Path(cache_dir)), opts, policy)
        elif opts["format"] == "stackexchange_xml":
            if not opts["path"]:
                raise ValueError(
                    "stackoverflow: format stackexchange_xml needs --option path=Comments.xml "
                    "(from the archive.org Stack Exchange dump, extracted)"
                )
            records = self._xml(Path(opts["path"]), opts, policy)
        else:
            raise ValueError("stackoverflow: format must be tff_sqlite or stackexchange_xml")
        users: set[str] = set()
        for record in records:
            if opts["max_users"] is not None and record.client_id not in users:
                if len(users) >= opts["max_users"]:
                    continue
                users.add(str(record.client_id))
            yield record
        policy.summary()

    # -- TFF sqlite -----------------------------------------------------------------------

    def _sqlite_path(self, opts: dict[str, Any], cache_dir: Path) -> Path:
        """A local sqlite file: the given one, or the download decompressed in the cache."""
        if opts["path"]:
            path = Path(opts["path"])
            if not path.is_file():
                raise FileNotFoundError(f"stackoverflow: {path} does not exist")
            if not path.name.endswith(".lzma"):
                return path
            compressed = path
        else:
            client = make_client(cache_dir, opts)
            compressed = client.download(opts["url"], cache_dir / Path(opts["url"]).name)
        target = cache_dir / compressed.name.removesuffix(".lzma")
        if not target.is_file():
            partial = target.with_name(target.name + ".part")
            target.parent.mkdir(parents=True, exist_ok=True)
            with lzma.open(compressed) as src, open(partial, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            partial.replace(target)
        return target

    def _tff(
        self, path: Path, opts: dict[str, Any], policy: RecordPolicy
    ) -> Iterator[SourceRecord]:
        unknown = set(opts["splits"]) - set(TFF_PARTS)
        if unknown:
            raise ValueError(f"stackoverflow: unknown TFF splits {sorted(unknown)}")
        marks = ",".join("?" for _ in opts["splits"])
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
            try:
                rows = db.execute(
                    "SELECT rowid, split_name, client_id, serialized_example_proto FROM examples "
                    f"WHERE split_name IN ({marks}) ORDER BY split_name, client_id, rowid",
                    opts["splits"],
                )
            except sqlite3.DatabaseError as exc:
                raise MalformedRecordError(
                    f"stackoverflow: {path} is not the TFF StackOverflow sqlite ({exc})"
                ) from exc
            for rowid, split, client_id, blob in rows:
                try:
                    features = parse_tf_example(blob)
                    text = _first(features, "tokens").decode("utf-8")
                    date = _first(features, "creation_date").decode("utf-8")[:10]
                except (ValueError, KeyError, UnicodeDecodeError) as exc:
                    policy.malformed(f"rowid {rowid}", f"bad tf.Example ({exc})")
                    continue
                extra: dict[str, Any] = {
                    "tff_split": split,
                    "title": _first(features, "title", b"").decode("utf-8", "replace"),
                    "tags": _first(features, "tags", b"").decode("utf-8", "replace"),
                    "score": int(_first(features, "score", 0)),
                }
                if opts["pin_parts"]:
                    extra["part"] = TFF_PARTS[split]
                yield SourceRecord(
                    text=text,
                    source_id=f"tff-so:{rowid}",
                    client_id=str(client_id),
                    date=date,
                    label=_first(features, "type", b"").decode("utf-8", "replace") or None,
                    licence=LICENCE,
                    extra=extra,
                )

    # -- Stack Exchange dump XML -----------------------------------------------------------

    def _xml(
        self, path: Path, opts: dict[str, Any], policy: RecordPolicy
    ) -> Iterator[SourceRecord]:
        opener = {".gz": gzip.open, ".bz2": bz2.open}.get(path.suffix, open)
        with opener(path, "rb") as handle:
            for _, row in ET.iterparse(handle, events=("end",)):
                if row.tag != "row":
                    continue
                attrs = dict(row.attrib)
                row.clear()
                record = self._xml_record(attrs, opts, policy)
                if record is not None:
                    yield record

    def _xml_record(
        self, attrs: dict[str, str], opts: dict[str, Any], policy: RecordPolicy
    ) -> SourceRecord | None:
        row_id = attrs.get("Id", "?")
        is_comment = "Text" in attrs
        user = attrs.get("UserId" if is_comment else "OwnerUserId")
        date = attrs.get("CreationDate", "")[:10]
        if not user:
            policy.skip("no user id (deleted user)")
            return None
        if len(date) != 10:
            policy.malformed(f"row {row_id}", "missing CreationDate")
            return None
        if is_comment:
            text, label, kind = attrs["Text"], "comment", "comment"
        else:
            text = html_to_text(attrs.get("Body", ""))
            label = {"1": "question", "2": "answer"}.get(attrs.get("PostTypeId", ""), "post")
            kind = "post"
        extra: dict[str, Any] = {"title": attrs.get("Title", ""), "tags": attrs.get("Tags", "")}
        extra["score"] = int(attrs.get("Score", "0") or 0)
        linked = "PostId" if is_comment else "ParentId"  # the post commented on / answered
        if attrs.get(linked, "").isdigit():
            extra["post_id" if is_comment else "parent_id"] = int(attrs[linked])
        if opts["tff_rule"]:
            held_out = user.isdigit() and int(user) % 10 == 0
            extra["part"] = "validation" if held_out else "test" if date >= TEST_FROM else "train"
        return SourceRecord(
            text=text,
            source_id=f"se-{kind}:{row_id}",
            client_id=user,
            date=date,
            label=label,
            licence=LICENCE,
            extra=extra,
        )


# -- tf.train.Example wire format ----------------------------------------------------------


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 70:
            raise ValueError("varint too long")


def _fields(data: bytes) -> Iterator[tuple[int, int, Any]]:
    """``(field number, wire type, value)`` of a protobuf message (bytes for wire type 2)."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 1:
            value, pos = data[pos : pos + 8], pos + 8
        elif wire == 2:
            size, pos = _varint(data, pos)
            value, pos = data[pos : pos + size], pos + size
        elif wire == 5:
            value, pos = data[pos : pos + 4], pos + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        if pos > len(data):
            raise ValueError("truncated message")
        yield number, wire, value


def _int64(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _feature_values(feature: bytes) -> list[Any]:
    """Values of a ``tf.train.Feature`` (bytes_list=1, float_list=2, int64_list=3)."""
    values: list[Any] = []
    for kind, _, payload in _fields(feature):
        for _, wire, item in _fields(payload):
            if kind == 1 and wire == 2:
                values.append(bytes(item))
            elif kind == 2:  # packed (wire 2) or one fixed32 (wire 5): little-endian floats
                values.extend(struct.unpack(f"<{len(item) // 4}f", item))
            elif kind == 3 and wire == 2:
                pos = 0
                while pos < len(item):
                    number, pos = _varint(item, pos)
                    values.append(_int64(number))
            elif kind == 3 and wire == 0:
                values.append(_int64(item))
            else:
                raise ValueError(f"unexpected field in feature kind {kind}")
    return values


def parse_tf_example(data: bytes) -> dict[str, list[Any]]:
    """Feature name -> values of a serialized ``tf.train.Example``."""
    features: dict[str, list[Any]] = {}
    for number, wire, payload in _fields(data):
        if number != 1 or wire != 2:
            continue
        for entry_number, entry_wire, entry in _fields(payload):
            if entry_number != 1 or entry_wire != 2:
                continue
            key, value = "", b""
            for field_number, _, content in _fields(entry):
                if field_number == 1:
                    key = content.decode("utf-8")
                elif field_number == 2:
                    value = content
            features[key] = _feature_values(value)
    return features


def _first(features: dict[str, list[Any]], name: str, default: Any = None) -> Any:
    values = features.get(name)
    if values:
        return values[0]
    if default is None:
        raise KeyError(f"feature {name!r} missing")
    return default
