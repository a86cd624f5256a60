"""bioRxiv source against a local server in the details-API format, and local hub files."""

import json

import pytest
from http_fixture import FixtureServer, Reply, closed_port_url

from benchmark import split_storage
from datasets_builders.http import MalformedRecordError, MalformedResponseError, UnreachableError
from datasets_builders.pipeline import build_split, options_for
from datasets_builders.sources.biorxiv import BiorxivSource

WINDOW = {"start": "2023-04-01", "end": "2023-04-30"}
FAST = {"backoff": 0.01, "retries": 2}


def paper(doi, version, date, licence="cc_by", abstract=None, **kw):
    return {
        "doi": doi,
        "title": f"Title {doi}",
        "authors": "Doe, J.; Roe, R.",
        "author_corresponding": kw.pop("author", "Jane Doe"),
        "author_corresponding_institution": "Somewhere",
        "date": date,
        "version": str(version),
        "type": "new results",
        "license": licence,
        "category": kw.pop("category", "neuroscience"),
        "jatsxml": "https://www.biorxiv.org/x.xml",
        "abstract": f"Abstract of {doi} v{version}." if abstract is None else abstract,
        "published": "NA",
        "server": "bioRxiv",
    }


RECORDS = [
    paper("10.1101/a", 1, "2023-04-03"),
    paper("10.1101/b", 2, "2023-04-10"),  # v1 was posted in March: outside the window
    paper("10.1101/c", 1, "2023-04-05", licence="cc_by_nc"),
    paper("10.1101/a", 2, "2023-04-20"),
    paper("10.1101/d", 1, "2023-04-30", abstract=""),  # malformed: no abstract
    paper("10.1101/e", 1, "2023-04-01", licence="cc0", category="genomics"),
]


def page(records, cursor, total):
    message = {
        "status": "ok",
        "interval": "2023-04-01:2023-04-30",
        "cursor": cursor,
        "count": len(records),
        "count_new_papers": str(len(records)),
        "total": str(total),  # the API sends the total as a string
    }
    return {"messages": [message], "collection": records}


def serve_window(server, records, page_size=2):
    for cursor in range(0, len(records), page_size):
        chunk = records[cursor : cursor + page_size]
        server.add(
            f"/details/biorxiv/2023-04-01/2023-04-30/{cursor}/json",
            Reply(page(chunk, cursor, len(records))),
        )
    server.add(
        "/details/biorxiv/10.1101/b/na/json",
        Reply(
            page([paper("10.1101/b", 1, "2023-03-15"), paper("10.1101/b", 2, "2023-04-10")], 0, 2)
        ),
    )


@pytest.fixture
def server():
    with FixtureServer() as srv:
        serve_window(srv, RECORDS)
        yield srv


def fetch(server, tmp_path, **options):
    source = BiorxivSource()
    opts = {**WINDOW, **FAST, "base_url": server.url, **options}
    return source, list(source.fetch(opts, tmp_path))


def test_pages_versions_licences_and_v1_dates(server, tmp_path):
    source, records = fetch(server, tmp_path)
    by_doi = {r.extra["doi"]: r for r in records}
    assert sorted(by_doi) == ["10.1101/a", "10.1101/b", "10.1101/e"]  # c: NC licence; d: bad
    a = by_doi["10.1101/a"]
    assert a.date == "2023-04-03" and a.text == "Abstract of 10.1101/a v2."
    assert a.extra["versions_seen"] == [1, 2] and a.licence == "cc_by"
    # v2 inside the window, v1 before it: dated by v1, so the pipeline's window drops it.
    assert by_doi["10.1101/b"].date == "2023-03-15"
    assert by_doi["10.1101/e"].label == "genomics" and by_doi["10.1101/e"].client_id == "10.1101/e"
    assert source.stats["skipped: licence cc_by_nc"] == 1
    assert source.stats["malformed: missing abstract"] == 1
    assert source.stats["api records"] == 6 and source.stats["v1 lookups"] == 1
    cursors = [h.path.split("/")[-2] for h in server.hits if "2023-04-01" in h.path]
    assert cursors == ["0", "2", "4"]


def test_licences_and_clients_are_options(server, tmp_path):
    _, records = fetch(
        server, tmp_path, licences="cc_by_nc,cc_by,cc0", client_by="author_corresponding"
    )
    assert "10.1101/c" in {r.extra["doi"] for r in records}
    assert {r.client_id for r in records} == {"Jane Doe"}


def test_second_fetch_resumes_from_cache_without_requests(server, tmp_path):
    _, first = fetch(server, tmp_path)
    hits = len(server.hits)
    _, second = fetch(server, tmp_path)
    assert second == first and len(server.hits) == hits


def test_malformed_record_can_stop_the_build(server, tmp_path):
    with pytest.raises(MalformedRecordError, match="10.1101/d.*missing abstract"):
        fetch(server, tmp_path, on_malformed="error")


def test_count_mismatch_is_a_clear_error(tmp_path):
    with FixtureServer() as srv:
        bad = page(RECORDS[:2], 0, 6)
        bad["messages"][0]["count"] = 3
        srv.add("/details/biorxiv/2023-04-01/2023-04-30/0/json", Reply(bad))
        with pytest.raises(MalformedResponseError, match="announces 3 records but holds 2"):
            fetch(srv, tmp_path)


def test_empty_window_and_rate_limit(tmp_path):
    with FixtureServer() as srv:
        empty = {"messages": [{"status": "no posts found", "total": "0"}], "collection": []}
        srv.add(
            "/details/biorxiv/2023-04-01/2023-04-30/0/json",
            Reply("busy", status=429, headers={"Retry-After": "0"}),
            Reply(empty),
        )
        _, records = fetch(srv, tmp_path)
        assert records == [] and len(srv.hits) == 2


def test_unreachable_api_names_the_host(tmp_path):
    source = BiorxivSource()
    with pytest.raises(UnreachableError, match="cannot reach 127.0.0.1"):
        list(source.fetch({**WINDOW, **FAST, "base_url": closed_port_url()}, tmp_path))


def test_hub_schema_local_files(tmp_path):
    rows = [paper("10.1101/h", 1, "2024-01-02"), paper("10.1101/h", 2, "2024-02-02")]
    rows.append(paper("10.1101/i", 1, "2024-01-05", licence="cc_by_nd"))
    path = tmp_path / "biorxiv.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    source = BiorxivSource()
    opts = {"origin": "hub", "files": str(path)}
    records = list(source.fetch(opts, tmp_path / "cache"))
    assert [(r.extra["doi"], r.date) for r in records] == [("10.1101/h", "2024-01-02")]
    assert source.revision(opts).startswith("local-files:1:")


def test_unknown_option_is_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown option.*licenses"):
        list(BiorxivSource().fetch({"licenses": "cc0"}, tmp_path))


def test_pipeline_window_drops_a_paper_whose_v1_precedes_it(tmp_path):
    """End to end: API -> source -> pipeline; both window edges are inclusive."""
    source = BiorxivSource()
    with FixtureServer() as srv:
        serve_window(srv, [*RECORDS, paper("10.1101/f", 1, "2023-04-30")])
        options = options_for(
            source,
            {
                "date_start": "2023-04-01",
                "date_end": "2023-04-30",
                "span_length": None,
                "validation_clients": 0,
                "test_clients": 0,
                "source_options": {**WINDOW, **FAST, "base_url": srv.url},
            },
        )
        manifest = build_split(source, options, tmp_path / "split", cache_dir=tmp_path / "cache")
    split = split_storage.load_split(tmp_path / "split")
    kept = sorted((r["source_id"], r["date"]) for r in split.records("train"))
    assert kept == [
        ("doi:10.1101/a", "2023-04-03"),
        ("doi:10.1101/e", "2023-04-01"),
        ("doi:10.1101/f", "2023-04-30"),
    ]
    assert manifest["filters"]["dropped"]["before_window"] == 1  # 10.1101/b, v1 in March
