"""c4 source on local shards in the allenai/c4 schema (json.gz with text/timestamp/url)."""

import gzip
import json

import pytest

from datasets_builders.sources.c4 import C4Source, host_matches

WORDS = " ".join(f"word{i}" for i in range(25))


def write_shards(tmp_path):
    docs = []
    for i in range(30):
        site = ["www.linkedin.com", "jobs.linkedin.com", "www.reddit.com", "example.org"][i % 4]
        docs.append(
            {
                "text": f"Job {i} title\n\nApply now for job {i}\n{WORDS} doc{i}",
                "timestamp": "2019-04-25T12:57:54Z",
                "url": f"https://{site}/post/{i}",
            }
        )
    docs.append(
        {"text": "fake", "timestamp": "2019-04-25T12:57:54Z", "url": "https://notlinkedin.com/x"}
    )
    paths = []
    for shard in range(2):
        path = tmp_path / f"c4-train.{shard:05d}-of-01024.json.gz"
        with gzip.open(path, "wt") as fh:
            for doc in docs[shard::2]:
                fh.write(json.dumps(doc) + "\n")
        paths.append(str(path))
    return ",".join(paths)


def test_site_matching_is_by_host():
    assert host_matches("https://jobs.linkedin.com/x", ["linkedin.com"])
    assert not host_matches("https://notlinkedin.com/x", ["linkedin.com"])


def test_jobs_subset_with_disjoint_public_population(tmp_path):
    files = write_shards(tmp_path)
    source = C4Source()
    opts = {"files": files, "buffer_size": 0, "max_samples": 20, "public_samples": 4}
    records = list(source.fetch(opts, tmp_path / "cache"))
    private = [r for r in records if "part" not in r.extra]
    public = [r for r in records if r.extra.get("part") == "public"]
    assert len(private) == 20 and len(public) == 4
    assert all(host_matches(r.extra["url"], ["linkedin.com"]) for r in private)
    assert not any(host_matches(r.extra["url"], ["linkedin.com", "reddit.com"]) for r in public)
    assert all(len(r.text.split()) > 20 for r in public)
    assert private[0].text == "Job 0 title" and private[0].date == "2019-04-25"
    assert private[0].source_id == "https://www.linkedin.com/post/0#L0"
    assert {r.label for r in private} == {"jobs"} and source.stats["documents"] < 31


def test_shuffled_stream_is_seeded_and_deterministic(tmp_path):
    files = write_shards(tmp_path)
    opts = {
        "files": files,
        "subset": "forums",
        "buffer_size": 8,
        "max_samples": 21,
        "public_samples": 0,
    }
    first = [r.source_id for r in C4Source().fetch({**opts, "seed": 100}, tmp_path / "c")]
    again = [r.source_id for r in C4Source().fetch({**opts, "seed": 100}, tmp_path / "c")]
    other = [r.source_id for r in C4Source().fetch({**opts, "seed": 7}, tmp_path / "c")]
    assert first == again and len(first) == 21 and first != other and set(first) == set(other)
    assert all("reddit.com" in s for s in first)


def test_revision_names_files_seed_and_buffer(tmp_path):
    files = write_shards(tmp_path)
    assert C4Source().revision({"files": files}).endswith("seed=100 buffer=1000000")
    assert C4Source().revision({"revision": "abc123"}).startswith("allenai/c4@abc123 config=en")


def test_bad_subset(tmp_path):
    with pytest.raises(ValueError, match="subset"):
        list(C4Source().fetch({"subset": "news"}, tmp_path))
