"""The one split pipeline every source shares: records in, versioned federated split out.

``build_split(source, options, out_dir)`` runs, in this order:

1. **fetch** the source's records, or reload them from the records cache
   (``<cache_dir>/records-<key>.jsonl``, keyed by source, source options, revision and
   ``max_records``, written atomically once a fetch completes; the source itself caches
   raw responses under ``<cache_dir>/raw``), so a rebuild or a resumed build does not
   start over. ``cache_dir`` defaults to ``$FEDSYNTH_CACHE/sources/<name>``;
2. **clean**: Unicode NFC, runs of spaces/tabs to one space, blank lines removed, strip;
   drop texts shorter than ``min_chars``;
3. **licence filter** (``licences``; records without a licence are dropped when it is set);
4. **date window** ``[date_start, date_end]``, both edges inclusive, on the record's
   ``date`` (the source's ``date_field``, recorded). A window on a source without dates
   (``date_field is None``, e.g. KJV) is refused, not silently ignored; records of a
   dated source that lack a date are dropped when a window is set;
5. **dedupe** (``dedupe``): ``text`` keeps the first record per hash of the case-folded,
   whitespace-collapsed text; ``record`` also hashes the extras (preference tuples that
   share a prompt); ``none`` keeps all (for sources that dedupe themselves);
6. **parts and clients**: records a source pins with ``extra["part"]`` go to that part;
   the ``public`` rule takes more (below); the rest are assigned to clients by the
   ``partition`` rule (:mod:`datasets_builders.partitioners`), and whole clients are held
   out for validation and test, so no client is split across train/validation/test;
7. **chunking** into successive ``span_length``-token spans (POPri/PrE-Text samples;
   ``None`` keeps whole documents); a span shorter than ``min_span_tokens`` (the tail of a
   document, or a short document) is dropped; span boundaries never split a character;
8. **contribution cap**: at most ``cap`` samples per client in train/validation/test,
   a seeded uniform subsample per client (the harness's contribution bound; PrE-Text
   used 8 or 16); ``public_max`` subsamples the public part;
9. **manifest and storage**: see :mod:`benchmark.split_manifest` and
   :mod:`benchmark.split_storage`.

Public rules: ``none``; ``clients:X`` (a fraction X < 1 or a count X of the partitioned
clients, drawn before the held-out ones); ``label:A,B`` (documents with these labels, e.g.
disjoint books); ``before_window`` (documents dated before ``date_start``: data from the
era a public model may have seen); ``before_window:person_disjoint`` (the same, less every
document of a client that also has documents in the window, so no person is on both sides).

Held-out sizes (``validation_clients``, ``test_clients``): a value below 1 is a fraction
of the partitioned clients (at least one client when positive), 1 or more a count.

Contract for source modules (beyond :class:`datasets_builders.source.Source`):

- ``extra`` values become extra columns of every part (lists and dicts as JSON text,
  other non-scalar values as ``str``; a column with mixed value types is stored as text);
- ``extra["part"]`` (one of train/validation/test/public) pins a record to a part, e.g. a
  paper's fixed evaluation records or a public initial population; pinned records keep
  their natural client id (else their source id) and are not partitioned;
- an optional class attribute ``split_defaults`` (a dict of :class:`SplitOptions` fields)
  is the source's paper recipe, applied by :func:`options_for` under the user's overrides;
- ``source_id`` must be unique per record (a repeat is refused);
- expected failures (unreachable origin, malformed data, bad options) should raise
  ``OSError`` or ``ValueError`` subclasses, which the CLI turns into one-line messages.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import hashlib
import importlib.util
import inspect
import itertools
import json
import random
import re
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from tqdm import tqdm

from benchmark import split_hash, split_storage
from benchmark import split_manifest as mf
from benchmark.data import (
    CLIENT_ID,
    DATE,
    LABEL,
    PARTS,
    PRIVATE_PARTS,
    SOURCE_ID,
    STRONG,
    TEXT,
)
from benchmark.files import atomic_write

from . import partitioners
from .source import Source, SourceRecord

PART_KEY = "part"
DEDUPE_RULES = ("text", "record", "none")


class SplitError(ValueError):
    """Bad options or records: the message says what to change."""


@dataclass
class SplitOptions:
    """Everything that defines a split besides the source (all of it is hashed)."""

    seed: int = 0
    date_start: str | None = None
    date_end: str | None = None
    licences: tuple[str, ...] | None = None
    min_chars: int = 1
    dedupe: str = "text"
    partition: str = "natural"
    partition_params: dict[str, Any] = field(default_factory=dict)
    label_key: str | None = None
    strong_fraction: float = 0.0
    span_length: int | None = 64
    min_span_tokens: int = 16
    tokenizer: str = "gpt2"
    cap: int | None = None
    validation_clients: float = 0.1
    test_clients: float = 0.1
    public: str = "none"
    public_max: int | None = None
    max_records: int | None = None
    source_options: dict[str, Any] = field(default_factory=dict)

    def validate(self) -> None:
        for name in ("date_start", "date_end"):
            value = getattr(self, name)
            if value is not None and _parse_date(value) != value:
                raise SplitError(f"{name} must be an ISO date YYYY-MM-DD, got {value!r}")
        if self.date_start and self.date_end and self.date_start > self.date_end:
            raise SplitError(f"date_start {self.date_start} is after date_end {self.date_end}")
        if self.dedupe not in DEDUPE_RULES:
            raise SplitError(f"dedupe must be one of {DEDUPE_RULES}, got {self.dedupe!r}")
        partitioners.rule_parameters(self.partition)  # raises on an unknown rule
        for name in ("span_length", "cap", "public_max", "max_records"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise SplitError(f"{name} must be a positive integer or unset, got {value!r}")
        for name in ("validation_clients", "test_clients"):
            value = getattr(self, name)
            if value < 0 or (value >= 1 and int(value) != value):
                raise SplitError(f"{name} must be a fraction in [0, 1) or a count, got {value!r}")
        _public_rule(self.public)

    def defining(self) -> dict[str, Any]:
        """The hashed build section: options as JSON, tokenizer unset when not chunking."""
        out = dataclasses.asdict(self)
        out.pop("source_options")
        if out["licences"] is not None:
            out["licences"] = sorted(out["licences"])
        if self.span_length is None:
            out["tokenizer"] = out["min_span_tokens"] = None
        return out


def options_for(source: Source, overrides: dict[str, Any] | None = None) -> SplitOptions:
    """Dataclass defaults, then the source's ``split_defaults`` recipe, then ``overrides``.

    Partition parameters given for the recipe's own rule are merged into the recipe's; a
    different rule starts from no parameters (the recipe's belong to its rule).
    """
    recipe = dict(getattr(source, "split_defaults", {}))
    overrides = dict(overrides or {})
    if overrides.get("partition", recipe.get("partition")) != recipe.get("partition"):
        recipe.pop("partition_params", None)
    elif "partition_params" in overrides:
        overrides["partition_params"] = {
            **recipe.get("partition_params", {}),
            **overrides["partition_params"],
        }
    values = {**recipe, **overrides}
    unknown = sorted(set(values) - {f.name for f in dataclasses.fields(SplitOptions)})
    if unknown:
        raise SplitError(f"unknown split options {unknown}")
    return SplitOptions(**values)


# --- tokenizers ----------------------------------------------------------------------


class Tokenizer(Protocol):
    name: str
    fingerprint: str

    def encode_batch(self, texts: list[str]) -> list[list[int]]: ...

    def decode_bytes(self, ids: Sequence[int]) -> bytes: ...


class _GPT2:
    """GPT-2's 50,257-token BPE from openai-whisper's bundled asset (never hub-downloaded)."""

    name = "gpt2"

    def __init__(self) -> None:
        import tiktoken
        from tiktoken_ext.openai_public import r50k_pat_str

        spec = importlib.util.find_spec("whisper")  # locates the package without importing it
        if spec is None or not spec.submodule_search_locations:
            raise SplitError("tokenizer 'gpt2' needs the openai-whisper package (asset only)")
        path = Path(spec.submodule_search_locations[0]) / "assets" / "gpt2.tiktoken"
        data = path.read_bytes()
        self.fingerprint = hashlib.sha256(data).hexdigest()
        ranks = {
            base64.b64decode(tok): int(rank)
            for tok, rank in map(bytes.split, data.splitlines())
            if tok
        }
        self._enc = tiktoken.Encoding(
            name="gpt2",
            pat_str=r50k_pat_str,
            mergeable_ranks=ranks,
            special_tokens={"<|endoftext|>": 50256},
        )

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return self._enc.encode_ordinary_batch(texts)

    def decode_bytes(self, ids: Sequence[int]) -> bytes:
        return self._enc.decode_bytes(list(ids))


class _LocalHF:
    """A tokenizer saved in a local directory (``hf:PATH``); nothing is downloaded."""

    def __init__(self, path: str) -> None:
        from transformers import AutoTokenizer

        directory = Path(path)
        if not directory.is_dir():
            raise SplitError(f"tokenizer directory {directory} does not exist")
        self.name = f"hf:{directory.resolve()}"
        digest = hashlib.sha256()
        for file in sorted(directory.iterdir()):
            if file.is_file() and re.search(r"tokenizer|vocab|merges|spiece|special", file.name):
                digest.update(file.name.encode() + b"\0" + file.read_bytes())
        self.fingerprint = digest.hexdigest()
        self._tok = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return self._tok(texts, add_special_tokens=False)["input_ids"]

    def decode_bytes(self, ids: Sequence[int]) -> bytes:
        return self._tok.decode(list(ids)).encode("utf-8")


def load_tokenizer(name: str) -> Tokenizer:
    """``gpt2`` (default) or ``hf:PATH`` to a local tokenizer directory."""
    if name == "gpt2":
        return _GPT2()
    if name.startswith("hf:"):
        return _LocalHF(name[3:])
    raise SplitError(f"unknown tokenizer {name!r}; use 'gpt2' or 'hf:PATH'")


def _complete_utf8(data: bytes) -> tuple[str, bytes]:
    """Decode ``data`` except an incomplete character at its end, which is returned."""
    try:
        return data.decode("utf-8"), b""
    except UnicodeDecodeError as exc:
        if exc.reason == "unexpected end of data":
            return data[: exc.start].decode("utf-8", errors="replace"), data[exc.start :]
        return data.decode("utf-8", errors="replace"), b""


def chunk_texts(
    texts: list[str], tokenizer: Tokenizer, span_length: int, min_span_tokens: int
) -> list[list[str]]:
    """Successive ``span_length``-token spans of each text (shorter ones dropped)."""
    shortest = min(min_span_tokens, span_length)
    out: list[list[str]] = []
    for ids in tokenizer.encode_batch(texts):
        spans, carry = [], b""
        for start in range(0, len(ids), span_length):
            piece = ids[start : start + span_length]
            text, carry = _complete_utf8(carry + tokenizer.decode_bytes(piece))
            if len(piece) >= shortest and text.strip():
                spans.append(text.strip())
        out.append(spans)
    return out


# --- records: fetch (cached), clean, filter ---------------------------------------------


def _records_cache(source: Source, options: SplitOptions, revision: str, cache_dir: Path) -> Path:
    """Keyed by the source's code too: records cached by an older mapping (e.g. chitchat's
    conversation-side clients before person clients) must not build a split under the new."""
    code = split_hash.sha256(Path(inspect.getfile(type(source))).read_bytes())
    key = split_hash.sha256(
        split_hash.canonical(
            {
                "source": source.name,
                "options": options.source_options,
                "revision": revision,
                "max_records": options.max_records,
                "code": code,
            }
        )
    )[:16]
    return cache_dir / f"records-{key}.jsonl"


def fetch_records(
    source: Source, options: SplitOptions, cache_dir: Path, revision: str, progress: bool = False
) -> tuple[list[SourceRecord], str]:
    """The source's records and their fetch time, from the records cache when present."""
    path = _records_cache(source, options, revision, cache_dir)
    if path.is_file():
        with path.open(encoding="utf-8") as handle:
            header = json.loads(next(handle))
            return [SourceRecord(**json.loads(line)) for line in handle], header["fetched_at"]
    fetched_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    stream = source.fetch(dict(options.source_options), cache_dir / "raw")
    records = []
    for record in tqdm(
        itertools.islice(stream, options.max_records),
        desc=f"fetch {source.name}",
        unit=" rec",
        disable=not progress,
    ):
        if not isinstance(record, SourceRecord):
            raise SplitError(
                f"source {source.name!r} yielded {type(record).__name__}, not SourceRecord"
            )
        records.append(record)
    # Atomic and private to this process: two runs that fetch one source at once (a suite's
    # parallel workers) each write their own temporary file, and either rename wins whole.
    lines = [json.dumps({"fetched_at": fetched_at, "source": source.name})]
    lines += [json.dumps(dataclasses.asdict(record), ensure_ascii=False) for record in records]
    atomic_write(path, "\n".join(lines) + "\n")
    return records, fetched_at


def clean_text(text: str) -> str:
    """NFC, one space for runs of spaces/tabs, no blank lines, stripped."""
    text = unicodedata.normalize("NFC", text)
    text = re.sub(r"[^\S\n]+", " ", text)
    return re.sub(r"\s*\n\s*", "\n", text).strip()


def _parse_date(value: Any) -> str | None:
    try:
        return dt.date.fromisoformat(str(value)[:10]).isoformat()
    except ValueError:
        return None


def _dedupe_key(record: SourceRecord, rule: str) -> str:
    key = " ".join(record.text.casefold().split())
    if rule == "record":
        key += (
            "\0"
            + split_hash.canonical(
                {k: v for k, v in record.extra.items() if k != PART_KEY}
            ).decode()
        )
    return hashlib.sha256(key.encode()).hexdigest()


# ``before_window:person_disjoint``: the earlier documents are public only when their client
# (a person, under a person-unit source) has none in the window, so no one is on both sides
# (plain ``before_window`` put 63 % of the bench's public spans in private people's hands).
PERSON_DISJOINT = "person_disjoint"


def _public_rule(rule: str) -> tuple[str, str]:
    kind, _, arg = rule.partition(":")
    if kind in ("none", "before_window") and not arg:
        return kind, arg
    if kind == "before_window" and arg == PERSON_DISJOINT:
        return kind, arg
    if kind == "label" and arg:
        return kind, arg
    if kind == "clients" and arg:
        try:
            value = float(arg)
        except ValueError:
            value = -1.0
        if value >= 0 and (value < 1 or value == int(value)):
            return kind, arg
    raise SplitError(
        f"bad public rule {rule!r}; use none, clients:FRACTION|COUNT, label:A,B, before_window "
        f"or before_window:{PERSON_DISJOINT}"
    )


@dataclass
class _Doc:
    record: SourceRecord
    order: int
    part: str | None = None  # pinned by the source or by a record-level public rule
    client: str | None = None


def _check_window(source: Source, options: SplitOptions) -> bool:
    """Whether a date window is set; refuses one on a source without dates."""
    window = options.date_start is not None or options.date_end is not None
    if window and source.date_field is None:
        raise SplitError(
            f"source {source.name!r} has no dates (date_field is None): a date window cannot "
            "be applied; drop --date-start/--date-end"
        )
    return window


def select_documents(
    records: Iterable[SourceRecord], options: SplitOptions, source: Source
) -> tuple[list[_Doc], Counter]:
    """Clean, licence-filter, window and dedupe; returns documents and drop counts."""
    drops: Counter = Counter()
    window = _check_window(source, options)
    public_kind, public_arg = _public_rule(options.public)
    if public_kind == "before_window" and options.date_start is None:
        raise SplitError("public rule before_window needs date_start")
    public_labels = set(public_arg.split(",")) if public_kind == "label" else set()
    licences = set(options.licences) if options.licences is not None else None
    seen: set[str] = set()
    ids: set[str] = set()
    docs: list[_Doc] = []
    for record in records:
        text = clean_text(record.text) if isinstance(record.text, str) else ""
        if not text:
            drops["empty"] += 1
            continue
        if len(text) < options.min_chars:
            drops["too_short"] += 1
            continue
        if licences is not None and record.licence not in licences:
            drops["licence"] += 1
            continue
        pinned = record.extra.get(PART_KEY)
        if pinned is not None and pinned not in PARTS:
            raise SplitError(f"record {record.source_id!r} pins unknown part {pinned!r}")
        date = None if record.date is None else _parse_date(record.date)
        if record.date is not None and date is None:
            drops["bad_date"] += 1
            continue
        if window:
            if date is None:
                drops["undated"] += 1
                continue
            if options.date_end is not None and date > options.date_end:
                drops["after_window"] += 1
                continue
            if options.date_start is not None and date < options.date_start:
                if public_kind != "before_window":
                    drops["before_window"] += 1
                    continue
                pinned = pinned or "public"
        if public_kind == "label" and record.label in public_labels:
            pinned = pinned or "public"
        record = dataclasses.replace(record, text=text, date=date)
        if options.dedupe != "none":
            key = _dedupe_key(record, options.dedupe)
            if key in seen:
                drops["duplicate"] += 1
                continue
            seen.add(key)
        if record.source_id in ids:
            raise SplitError(f"source {source.name!r} yielded source_id {record.source_id!r} twice")
        ids.add(record.source_id)
        docs.append(_Doc(record, len(docs), pinned))
    if public_arg == PERSON_DISJOINT:
        docs = _without_private_people(docs, drops)
    return docs, drops


def _without_private_people(docs: list[_Doc], drops: Counter) -> list[_Doc]:
    """The documents less the public ones whose client also has private documents."""
    private = {d.record.client_id for d in docs if d.part != "public"} - {None}
    kept = [d for d in docs if d.part != "public" or d.record.client_id not in private]
    drops["public_of_a_private_person"] += len(docs) - len(kept)
    return kept


# --- clients and parts ----------------------------------------------------------------


def _count(spec: float, total: int) -> int:
    if spec >= 1:
        return int(spec)
    return max(1, round(spec * total)) if spec > 0 and total else 0


def _label_of(record: SourceRecord, label_key: str | None) -> str | None:
    value = record.label if label_key is None else record.extra.get(label_key)
    return None if value is None else str(value)


def assign_clients(
    docs: list[_Doc], options: SplitOptions
) -> tuple[dict[str, dict[str, Any]], Counter]:
    """Give every document a client and a part; returns per-client facts and drop counts."""
    drops: Counter = Counter()
    free = [d for d in docs if d.part is None]
    items = [
        partitioners.Item(
            d.record.source_id, d.record.client_id, _label_of(d.record, options.label_key)
        )
        for d in free
    ]
    placement = partitioners.partition(
        items, options.partition, options.partition_params, options.seed
    )
    for doc, client in zip(free, placement.clients, strict=True):
        doc.client = client
    for doc in docs:
        if doc.part is not None:
            doc.client = doc.record.client_id or doc.record.source_id
    drops["partition_unplaced"] = sum(d.client is None for d in free)

    clients = sorted({d.client for d in free if d.client is not None})
    public_kind, public_arg = _public_rule(options.public)
    n_public = _count(float(public_arg), len(clients)) if public_kind == "clients" else 0
    n_val = _count(options.validation_clients, len(clients))
    n_test = _count(options.test_clients, len(clients))
    if clients and n_public + n_val + n_test >= len(clients):
        raise SplitError(
            f"{len(clients)} clients cannot give {n_public} public, {n_val} validation and "
            f"{n_test} test clients and still leave training clients"
        )
    order = random.Random(f"{options.seed}|holdout").sample(clients, len(clients))
    part_of = dict.fromkeys(order, "train")
    bounds = itertools.accumulate([n_public, n_val, n_test])
    for name, (start, stop) in zip(
        ("public", "validation", "test"), itertools.pairwise([0, *bounds]), strict=True
    ):
        part_of.update(dict.fromkeys(order[start:stop], name))
    for doc in free:
        if doc.client is not None:
            doc.part = part_of[doc.client]
    train = [c for c in clients if part_of[c] == "train"]
    if options.partition == "label_subset" and options.strong_fraction > 0:
        # paper 001's non-IID setting skews only the strong clients' data: the skewed
        # training clients are the strong ones (label_subset's skewed_fraction sets how many)
        strong = {c for c in train if "labels" in placement.client_info.get(c, {})}
    else:
        strong = partitioners.flag_strong(train, options.strong_fraction, options.seed)
    info: dict[str, dict[str, Any]] = {}
    for client in clients:
        info[client] = {**placement.client_info.get(client, {})}
        if part_of[client] == "train":
            info[client]["strong"] = client in strong
    return info, drops


# --- samples ---------------------------------------------------------------------------


def _flatten_extra(extra: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for key, value in extra.items():
        if key == PART_KEY:
            continue
        if key in split_storage.BASE_COLUMNS:
            raise SplitError(f"extra field {key!r} clashes with a column name")
        if isinstance(value, list | dict):
            value = json.dumps(value, sort_keys=True, default=str)
        elif not isinstance(value, str | int | float | bool | None):
            value = str(value)  # dates, numpy scalars, …: stored as their text
        out[key] = value
    return out


def _unify_columns(rows: list[dict[str, Any]]) -> None:
    """Give every row every column (None when absent); store a mixed-type column as text."""
    types: dict[str, set[type]] = defaultdict(set)
    for row in rows:
        for key, value in row.items():
            types[key].update(() if value is None else (type(value),))
    mixed = {key for key, kinds in types.items() if len(kinds) > 1}
    for row in rows:
        for key in types:
            value = row.get(key)
            if key in mixed and value is not None and not isinstance(value, str):
                value = json.dumps(value)
            row[key] = value


def make_samples(
    docs: list[_Doc], options: SplitOptions, tokenizer: Tokenizer | None, progress: bool = False
) -> tuple[dict[str, list[tuple[tuple, dict[str, Any]]]], Counter]:
    """Chunk placed documents into sample rows, keyed for a stable order."""
    drops: Counter = Counter()
    placed = [d for d in docs if d.part is not None and d.client is not None]
    texts = [d.record.text for d in placed]
    if options.span_length is None or tokenizer is None:
        spans = [[t] for t in texts]
    else:
        spans = []
        batch = 512
        for start in tqdm(
            range(0, len(texts), batch), desc="chunk", unit=" batch", disable=not progress
        ):
            spans += chunk_texts(
                texts[start : start + batch],
                tokenizer,
                options.span_length,
                options.min_span_tokens,
            )
    parts: dict[str, list[tuple[tuple, dict[str, Any]]]] = {p: [] for p in PARTS}
    for doc, doc_spans in zip(placed, spans, strict=True):
        if not doc_spans:
            drops["no_span"] += 1
        extra = _flatten_extra(doc.record.extra)
        for index, text in enumerate(doc_spans):
            source_id = doc.record.source_id
            if options.span_length is not None:
                source_id = f"{source_id}#{index}"
            row = {
                TEXT: text,
                CLIENT_ID: str(doc.client),
                DATE: doc.record.date,
                LABEL: None if doc.record.label is None else str(doc.record.label),
                SOURCE_ID: source_id,
                **extra,
            }
            parts[str(doc.part)].append(((str(doc.client), doc.order, index), row))
    return parts, drops


def flag_strong_rows(
    parts: dict[str, list[dict[str, Any]]], client_info: dict[str, dict[str, Any]]
) -> None:
    """Copy each training client's capability flag into its rows (column ``strong``), where
    the harness's pool reads it (``pool.strong_clients``); other parts' rows hold None."""
    for row in parts["train"]:
        row[STRONG] = bool(client_info.get(row[CLIENT_ID], {}).get("strong"))
    _unify_columns([row for rows in parts.values() for row in rows])


def apply_caps(
    parts: dict[str, list[tuple[tuple, dict[str, Any]]]], options: SplitOptions
) -> tuple[dict[str, list[dict[str, Any]]], Counter]:
    """Per-client cap on private parts, ``public_max`` on public; rows in stable order."""
    drops: Counter = Counter()
    out: dict[str, list[dict[str, Any]]] = {}
    for part in PARTS:
        keyed = sorted(parts[part], key=lambda kr: kr[0])
        if part in PRIVATE_PARTS and options.cap is not None:
            by_client: dict[str, list] = defaultdict(list)
            for key_row in keyed:
                by_client[key_row[0][0]].append(key_row)
            kept = []
            for client, rows in by_client.items():
                if len(rows) > options.cap:
                    rng = random.Random(f"{options.seed}|cap|{client}")
                    rows = sorted(rng.sample(rows, options.cap), key=lambda kr: kr[0])
                    drops["capped_samples"] += len(by_client[client]) - options.cap
                    drops["capped_clients"] += 1
                kept += rows
            keyed = kept
        if part == "public" and options.public_max is not None and len(keyed) > options.public_max:
            rng = random.Random(f"{options.seed}|public")
            drops["public_subsampled"] += len(keyed) - options.public_max
            keyed = sorted(rng.sample(keyed, options.public_max), key=lambda kr: kr[0])
        out[part] = [row for _, row in keyed]
    _unify_columns([row for rows in out.values() for row in rows])
    return out, drops


# --- the pipeline ----------------------------------------------------------------------


def default_cache_dir(source: Source) -> Path:
    """``$FEDSYNTH_CACHE/sources/<name>``: shared by every build of the source."""
    from benchmark.profiles.cache import SOURCES, cache_dir

    return cache_dir() / SOURCES / source.name


def source_section(source: Source, options: SplitOptions, revision: str) -> dict[str, Any]:
    """The manifest's source section: what the data came from (hashed but the prose)."""
    return {
        "name": source.name,
        "revision": revision,
        "options": options.source_options,
        "description": source.description,
        "demo": source.demo,
        "date_field": source.date_field,
    }


def built_with(out_dir: str | Path, source: Source, options: SplitOptions) -> bool:
    """Whether ``out_dir`` holds a finished split of ``source`` built under ``options``: its
    manifest's source section (the source's options and revision included) and build
    section (plus the tokenizer's fingerprint) are the ones a build now would write."""
    if not split_storage.is_complete(out_dir):
        return False
    manifest = split_storage.read_manifest(out_dir)
    built = dict(manifest["build"])
    built.pop("tokenizer_sha256", None)
    now = source_section(source, options, source.revision(dict(options.source_options)))
    return split_hash.canonical(built) == split_hash.canonical(options.defining()) and (
        split_hash.canonical(split_hash.hashed_source(manifest["source"]))
        == split_hash.canonical(split_hash.hashed_source(now))
    )


def build_split(
    source: Source,
    options: SplitOptions,
    out_dir: str | Path,
    *,
    cache_dir: str | Path | None = None,
    overwrite: bool = False,
    progress: bool = False,
) -> dict[str, Any]:
    """Build, hash and store one split; returns its manifest."""
    options.validate()
    _check_window(source, options)  # before any fetch: fail fast
    split_storage.check_target(out_dir, overwrite)
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir(source)
    tokenizer = load_tokenizer(options.tokenizer) if options.span_length is not None else None
    revision = source.revision(dict(options.source_options))
    records, fetched_at = fetch_records(source, options, cache, revision, progress)
    docs, drops = select_documents(records, options, source)
    if not docs:
        raise SplitError(f"no records of {source.name!r} are left after filtering ({dict(drops)})")
    client_info, more = assign_clients(docs, options)
    drops += more
    keyed, more = make_samples(docs, options, tokenizer, progress)
    drops += more
    parts, more = apply_caps(keyed, options)
    drops += more
    if options.strong_fraction > 0:
        flag_strong_rows(parts, client_info)
    if not any(parts.values()):  # a public-only split (e.g. a public prompt set) is fine
        raise SplitError(f"no samples of {source.name!r} are left ({dict(drops)})")

    sidecar = _sidecar(docs, parts, client_info)
    sidecar_bytes = split_hash.canonical(sidecar)
    source_part = source_section(source, options, revision)
    build_section = options.defining()
    build_section["tokenizer_sha256"] = tokenizer.fingerprint if tokenizer else None
    digest = split_hash.content_hash(
        parts, source_part, build_section, split_hash.sha256(sidecar_bytes)
    )
    version = split_hash.version_of(digest)
    manifest = {
        "format": split_hash.FORMAT,
        "name": f"{source.name}-{version}",
        "version": version,
        "content_hash": digest,
        "demo": source.demo,
        "source": source_part,
        "build": build_section,
        "filters": {
            "date_window": {
                "start": options.date_start,
                "end": options.date_end,
                "field": source.date_field,
                "inclusive": True,
            },
            "licences": build_section["licences"],
            "min_chars": options.min_chars,
            "dedupe": options.dedupe,
            "dropped": {k: v for k, v in sorted(drops.items()) if v},
            # the source's own counters from this fetch (malformed, skipped, …); not hashed
            "source_stats": dict(sorted(getattr(source, "stats", {}).items())),
        },
        "partition": {
            "rule": options.partition,
            "params": options.partition_params,
            "label_key": options.label_key,
            "strong_fraction": options.strong_fraction,
            "strong_clients": sum(bool(i.get("strong")) for i in client_info.values()),
            "clients_file": {
                "path": split_storage.CLIENTS,
                "sha256": split_hash.sha256(sidecar_bytes),
                "documents": len(sidecar["documents"]),
            },
        },
        # prose about the unit, derived from the hashed source and options: not hashed itself
        "privacy_unit": privacy_unit(source, options),
        "holdout": {
            "unit": "client",
            "validation_clients": options.validation_clients,
            "test_clients": options.test_clients,
        },
        "public": {"rule": options.public, "max": options.public_max},
        "chunking": {
            "tokenizer": build_section["tokenizer"],
            "tokenizer_sha256": build_section["tokenizer_sha256"],
            "span_length": options.span_length,
            "min_span_tokens": build_section["min_span_tokens"],
        },
        "cap": {"max_samples_per_client": options.cap, "parts": list(PRIVATE_PARTS)},
        "counts": {
            "records_fetched": len(records),
            "documents": len(docs),
            **{part: mf.summarise_part(parts[part]) for part in PARTS},
            "clients_in_several_private_parts": _shared_clients(parts),
        },
        "licences": dict(sorted(Counter(str(d.record.licence) for d in docs if d.part).items())),
        "fetched_at": fetched_at,
        "built_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }
    split_storage.save_split(
        out_dir, parts, manifest, sidecar_bytes, overwrite=overwrite, progress=progress
    )
    return manifest


def privacy_unit(source: Source, options: SplitOptions) -> dict[str, Any]:
    """What the privacy unit "user" means on this split, in words: the client the partition
    made, whether that client is one person, and the contribution cap. Records and tables
    print ``statement``, so a reader never has to guess who ε protects."""
    if options.partition == "natural":
        words, person = source.client_unit(dict(options.source_options))
    elif options.partition == "document":
        words, person = f"one {source.name} document (a person may write several)", False
    else:
        words = f"a synthetic client dealt by the {options.partition!r} rule (not a person)"
        person = False
    sample = "span" if options.span_length is not None else "document"
    plural = "" if options.cap == 1 else "s"
    cap = "" if options.cap is None else f", ≤ {options.cap} {sample}{plural} each"
    return {
        "client": words,
        "person": person,
        "cap": options.cap,
        "statement": f"user = {words}{cap}",
    }


def _shared_clients(parts: dict[str, list[dict[str, Any]]]) -> int:
    """Clients present in more than one private part (only source-pinned parts can do this)."""
    seen = Counter(c for p in PRIVATE_PARTS for c in {row[CLIENT_ID] for row in parts[p]})
    return sum(n > 1 for n in seen.values())


def _sidecar(
    docs: list[_Doc], parts: dict[str, list[dict[str, Any]]], client_info: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """Document -> client map and per-part client facts (kept out of the manifest: large)."""
    per_part: dict[str, dict[str, dict[str, Any]]] = {p: {} for p in PARTS}
    for part, rows in parts.items():
        for client, n in sorted(Counter(row[CLIENT_ID] for row in rows).items()):
            per_part[part][client] = {"samples": n, **client_info.get(client, {})}
    return {
        "documents": {
            d.record.source_id: d.client
            for d in docs
            if d.part is not None and d.client is not None
        },
        "clients": per_part,
    }
