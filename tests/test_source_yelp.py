"""Yelp source: Yelp Open Dataset JSON files and Aug-PE CSVs, with control codes."""

import gzip
import json

import pytest

from datasets_builders.http import MalformedRecordError
from datasets_builders.sources.yelp import YelpSource

BUSINESSES = [
    {"business_id": "b1", "name": "Pizza Place", "categories": "Pizza, Restaurants, Bars"},
    {"business_id": "b2", "name": "Spa", "categories": "Day Spas, Beauty & Spas"},
    {"business_id": "b3", "name": "Garage", "categories": "Automotive, Auto Repair"},
    {"business_id": "b4", "name": "No categories", "categories": None},
]
REVIEWS = [
    {"review_id": "r1", "user_id": "u1", "business_id": "b1", "stars": 5.0,
     "text": "Great crust.", "date": "2019-03-01 12:00:00"},
    {"review_id": "r2", "user_id": "u2", "business_id": "b2", "stars": 2,
     "text": "Too loud.", "date": "2020-01-05 08:00:00"},
    {"review_id": "r3", "user_id": "u1", "business_id": "b3", "stars": 4.0,
     "text": "Fixed my car.", "date": "2020-01-06 08:00:00"},
]  # fmt: skip


def write_json(tmp_path, broken=False):
    reviews = tmp_path / "yelp_academic_dataset_review.json.gz"
    with gzip.open(reviews, "wt") as fh:
        for review in REVIEWS:
            fh.write(json.dumps(review) + "\n")
        if broken:
            fh.write('{"review_id": "r4", "stars": "five"}\n')
    businesses = tmp_path / "yelp_academic_dataset_business.json"
    businesses.write_text("\n".join(json.dumps(b) for b in BUSINESSES))
    return {"reviews": str(reviews), "businesses": str(businesses)}


def test_open_dataset_json_gives_users_dates_and_control_codes(tmp_path):
    source = YelpSource()
    records = list(source.fetch(write_json(tmp_path, broken=True), tmp_path))
    assert [(r.source_id, r.client_id, r.date, r.label) for r in records] == [
        ("yelp:r1", "u1", "2019-03-01", "Restaurants|5.0"),
        ("yelp:r2", "u2", "2020-01-05", "Beauty & Spas|2.0"),
    ]
    assert records[0].extra == {"category": "Restaurants", "stars": "5.0", "business_id": "b1"}
    assert source.stats["skipped: business outside the control-code categories"] == 1
    assert source.stats["malformed: bad review (ValueError)"] == 1
    assert source.revision(write_json(tmp_path)).startswith("local-files:2:")


def test_label_variants_and_category_subset(tmp_path):
    opts = {**write_json(tmp_path), "label": "stars", "categories": "Bars,Shopping"}
    records = list(YelpSource().fetch(opts, tmp_path))
    assert [(r.label, r.extra["category"]) for r in records] == [("5.0", "Bars")]
    coded = list(YelpSource().fetch({**opts, "label": "paper001"}, tmp_path))
    assert [r.label for r in coded] == ["Business Category: Bars, Review Stars: 5.0"]


def test_augpe_csv_pins_dev_and_test(tmp_path):
    header = "text,label1,label2\n"
    (tmp_path / "train.csv").write_text(
        header + '"Nice, cosy bar.",Business Category: Bars,Review Stars: 4.0\n'
        "Bad.,Business Category: Shopping,Review Stars: x\n"
    )
    (tmp_path / "dev.csv").write_text(
        header + "Lovely hotel.,Business Category: Hotels & Travel,Review Stars: 5.0\n"
    )
    source = YelpSource()
    files = f"{tmp_path / 'train.csv'},{tmp_path / 'dev.csv'}"
    records = list(source.fetch({"format": "augpe_csv", "files": files}, tmp_path))
    assert [(r.text, r.label, r.extra.get("part")) for r in records] == [
        ("Nice, cosy bar.", "Bars|4.0", None),
        ("Lovely hotel.", "Hotels & Travel|5.0", "validation"),
    ]
    assert records[0].client_id is None and source.stats["malformed: bad Review Stars"] == 1
    with pytest.raises(MalformedRecordError, match="train.csv:2"):
        list(
            YelpSource().fetch(
                {"format": "augpe_csv", "files": files, "on_malformed": "error"}, tmp_path
            )
        )


def test_missing_files_are_explained(tmp_path):
    with pytest.raises(ValueError, match="accepting Yelp's terms"):
        list(YelpSource().fetch({}, tmp_path))
