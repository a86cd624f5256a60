"""Yelp reviews with control codes (business category x star rating) for paper 001.

Yelp's terms forbid redistribution and require accepting them before download, so this
source reads files the user downloaded (``format``):

* ``json`` (default): the Yelp Open Dataset (https://www.yelp.com/dataset),
  ``yelp_academic_dataset_review.json`` (``reviews``; JSON lines with ``review_id``,
  ``user_id``, ``business_id``, ``stars``, ``text``, ``date``) and
  ``yelp_academic_dataset_business.json`` (``businesses``; ``business_id``, ``categories``
  as a comma-separated string). Clients are the reviewers (``user_id``), dates the review
  dates.
* ``augpe_csv``: the processed CSVs of Yue et al. / Aug-PE (``text,label1,label2`` with
  ``Business Category: Restaurants`` and ``Review Stars: 5.0``), e.g. Aug-PE's
  ``data/yelp/{train,dev,test}.csv``, given as ``files``. They carry no user ids or dates:
  clients come from the pipeline's partitioner (paper 001: IID, 100 clients x 15,000).
  ``dev``/``validation`` and ``test`` files are pinned to those parts (``pin_parts``).

Control codes: the 10 business categories of Yue et al. (``categories``) x stars 1-5, 50
codes. A business's category is the first of its own listed categories that is one of the
10 (the rule is not stated by the papers; reviews of businesses with none are skipped and
counted). ``label`` is the control code ``"<category>|<stars>"`` (``label=code``, e.g.
``Restaurants|5.0``), paper 001's code string (``label=paper001``: ``Business Category:
Restaurants, Review Stars: 5.0``), or only the category or only the stars; ``extra`` always holds
``category`` and ``stars`` so the pipeline's ``label_key`` can partition on either (paper
001's rating-skew and category-skew non-IID clients).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from datasets_builders.hub import expand_files, files_revision, opener, read_local
from datasets_builders.source import Source, SourceRecord
from datasets_builders.sources._common import Option, RecordPolicy, parse_options

CATEGORIES = [
    "Arts & Entertainment",
    "Bars",
    "Beauty & Spas",
    "Event Planning & Services",
    "Grocery",
    "Health & Medical",
    "Home & Garden",
    "Hotels & Travel",
    "Restaurants",
    "Shopping",
]
LICENCE = "yelp-dataset-terms"
_PARTS = {"dev": "validation", "validation": "validation", "test": "test"}

OPTIONS = (
    Option("format", "json", "json (Yelp Open Dataset) or augpe_csv"),
    Option("reviews", None, "path to yelp_academic_dataset_review.json"),
    Option("businesses", None, "path to yelp_academic_dataset_business.json"),
    Option("files", None, "Aug-PE CSV files (format augpe_csv)", "list"),
    Option("categories", CATEGORIES, "top-level categories used as control codes", "list"),
    Option("label", "code", "label: code (category|stars), paper001, category or stars"),
    Option("pin_parts", True, "augpe_csv: dev/test files become validation/test", "bool"),
    Option("on_malformed", "skip", "malformed records: skip (counted) or error"),
)


def control_code(category: str, stars: float, kind: str) -> str:
    stars_text = f"{float(stars):.1f}"
    return {
        "code": f"{category}|{stars_text}",
        "paper001": f"Business Category: {category}, Review Stars: {stars_text}",
        "category": category,
        "stars": stars_text,
    }[kind]


class YelpSource(Source):
    name: ClassVar[str] = "yelp"
    description: ClassVar[str] = "Yelp reviews with category x rating control codes (paper 001)"
    date_field: ClassVar[str | None] = "review_date"
    client_words: ClassVar[str] = "one Yelp reviewer"
    client_is_person: ClassVar[bool] = True
    options: ClassVar[tuple[Option, ...]] = OPTIONS
    split_defaults: ClassVar[dict[str, Any]] = {"span_length": None}

    def __init__(self) -> None:
        self.stats: Counter[str] = Counter()

    def revision(self, options: dict[str, Any]) -> str:
        opts = parse_options(options, OPTIONS, self.name)
        files = (
            opts["files"]
            if opts["format"] == "augpe_csv"
            else [opts["reviews"], opts["businesses"]]
        )
        return files_revision(expand_files([f for f in files or [] if f]))

    def fetch(self, options: dict[str, Any], cache_dir: Path) -> Iterator[SourceRecord]:
        opts = parse_options(options, OPTIONS, self.name)
        if opts["label"] not in {"code", "paper001", "category", "stars"}:
            raise ValueError("yelp: label must be code, paper001, category or stars")
        self.stats = Counter()
        policy = RecordPolicy(self.name, opts["on_malformed"], self.stats)
        if opts["format"] == "json":
            if not opts["reviews"] or not opts["businesses"]:
                raise ValueError(
                    "yelp: format json needs --option reviews=PATH and --option businesses=PATH "
                    "(Yelp Open Dataset files; download them after accepting Yelp's terms)"
                )
            yield from self._json(opts, policy)
        elif opts["format"] == "augpe_csv":
            if not opts["files"]:
                raise ValueError("yelp: format augpe_csv needs --option files=train.csv,...")
            yield from self._csv(opts, policy)
        else:
            raise ValueError("yelp: format must be json or augpe_csv")
        policy.summary()

    def _record(
        self,
        text: str,
        source_id: str,
        category: str,
        stars: float,
        opts: dict[str, Any],
        **kw: Any,
    ) -> SourceRecord:
        extra = {"category": category, "stars": f"{float(stars):.1f}", **kw.pop("extra", {})}
        return SourceRecord(
            text=text,
            source_id=source_id,
            label=control_code(category, stars, opts["label"]),
            licence=LICENCE,
            extra=extra,
            **kw,
        )

    def _json(self, opts: dict[str, Any], policy: RecordPolicy) -> Iterator[SourceRecord]:
        wanted = set(opts["categories"])
        category_of: dict[str, str] = {}
        for business in read_local(Path(opts["businesses"])):
            listed = [c.strip() for c in str(business.get("categories") or "").split(",")]
            top = next((c for c in listed if c in wanted), None)
            if top and business.get("business_id"):
                category_of[str(business["business_id"])] = top
        path = Path(opts["reviews"])
        with opener(path)(path, "rt", encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                try:
                    review = json.loads(line)
                    stars = float(review["stars"])
                    fields = (review["review_id"], review["user_id"], review["text"])
                except (ValueError, KeyError, TypeError) as exc:
                    policy.malformed(
                        f"{path.name}:{number}", f"bad review ({exc.__class__.__name__})"
                    )
                    continue
                category = category_of.get(str(review.get("business_id")))
                if category is None:
                    policy.skip("business outside the control-code categories")
                    continue
                review_id, user_id, text = (str(f) for f in fields)
                yield self._record(
                    text,
                    f"yelp:{review_id}",
                    category,
                    stars,
                    opts,
                    client_id=user_id,
                    date=str(review.get("date") or "")[:10] or None,
                    extra={"business_id": str(review.get("business_id"))},
                )

    def _csv(self, opts: dict[str, Any], policy: RecordPolicy) -> Iterator[SourceRecord]:
        wanted = set(opts["categories"])
        for path in expand_files(opts["files"]):
            part = _PARTS.get(path.name.split(".")[0].lower()) if opts["pin_parts"] else None
            for number, row in enumerate(read_local(path), 1):
                category = str(row.get("label1") or "").removeprefix("Business Category:").strip()
                stars_text = str(row.get("label2") or "").removeprefix("Review Stars:").strip()
                text = str(row.get("text") or "")
                try:
                    stars = float(stars_text)
                except ValueError:
                    policy.malformed(f"{path.name}:{number}", "bad Review Stars")
                    continue
                if not text.strip() or category not in wanted:
                    policy.malformed(f"{path.name}:{number}", "missing text or unknown category")
                    continue
                extra = {"part": part} if part else {}
                yield self._record(
                    text, f"yelp-{path.stem}:{number}", category, stars, opts, extra=extra
                )
