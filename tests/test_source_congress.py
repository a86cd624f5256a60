"""Congress source: GovInfo CREC, TheyWorkForYou XML, openparliament.ca JSON, hub files."""

import json

import pytest
from http_fixture import FixtureServer, Reply

from datasets_builders.http import FetchError
from datasets_builders.sources.congress import (
    CongressSource,
    clean_speech,
    crec_turns,
    is_presiding_officer,
    letter_share,
)

WINDOW = {"start": "2023-04-01", "end": "2023-04-30", "backoff": 0.01, "retries": 2}

CREC_HTML = """<html>
<head>
<title>Congressional Record, Volume 169 Issue 65 (Monday, April 17, 2023)</title>
</head>
<body><pre>
[Congressional Record Volume 169, Number 65 (Monday, April 17, 2023)]
[House]
[Pages H1789-H1790]
From the Congressional Record Online through the Government Publishing Office [<a href="https://www.gpo.gov">www.gpo.gov</a>]




                  HONORING THE RIVERSIDE LIBRARY VOLUNTEERS

  The SPEAKER pro tempore. The Chair recognizes the gentleman from Ohio
(Mr. Smith) for 5 minutes.
  Mr. SMITH of Ohio. Mr. Speaker, I rise today to honor the volunteers of
the Riverside Library, who have kept its doors open for thirty years.
  {time}  1015
  They read to children every Saturday &amp; they never ask for thanks.

[[Page H1790]]

  Roll call totals were 212 to 201 (12-3-4; 55-6).
  I yield back the balance of my time.
  The SPEAKER pro tempore. The gentleman yields back.
  Ms. McGOVERN. Madam Speaker, I ask unanimous consent that all Members
may have 5 legislative days to revise and extend their remarks.
  The SPEAKER pro tempore. Is there objection to the request of the
gentlewoman from Massachusetts?
  There was no objection.
  Mr. DeSAULNIER. Mr. Speaker, I thank the gentleman for yielding. Our
communities depend on libraries more than ever before.
  The Clerk read the title of the bill.
  Mrs. JACKSON LEE. I move to strike the last word.
                          ____________________
</pre></body>
</html>
"""

TWFY_XML = """<?xml version="1.0" encoding="utf-8"?>
<publicwhip scraperversion="b" latest="yes">
<major-heading id="uk.org.publicwhip/debate/2023-04-17b.1.0" nospeaker="true">
Oral Answers to Questions</major-heading>
<minor-heading id="uk.org.publicwhip/debate/2023-04-17b.1.1" nospeaker="true">
Rural Bus Services</minor-heading>
<speech id="uk.org.publicwhip/debate/2023-04-17b.1.2" speakername="Jane Example"
 person_id="uk.org.publicwhip/person/99001" colnum="1" time="14:31:00">
<p pid="b1.2/1">What steps the Government are taking to support rural buses in Devon.</p>
</speech>
<speech id="uk.org.publicwhip/debate/2023-04-17b.1.3" speakername="Mr Speaker"
 person_id="uk.org.publicwhip/person/10295"><p pid="b1.3/1">Order.</p></speech>
<speech id="uk.org.publicwhip/debate/2023-04-17b.1.4" nospeaker="true">
<p pid="b1.4/1">Question put and agreed to.</p></speech>
<speech id="uk.org.publicwhip/debate/2023-04-17b.1.5" speakername="John Sample"
 person_id="uk.org.publicwhip/person/99002">
<p pid="b1.5/1">I thank my hon. Friend for her question.</p>
<p pid="b1.5/2">We have given <i>&#163;300 million</i> to local authorities this year.</p>
</speech>
</publicwhip>
"""

TWFY_INDEX = """<html><body><table>
<tr><td><a href="debates2023-04-17a.xml">debates2023-04-17a.xml</a></td></tr>
<tr><td><a href="debates2023-04-17b.xml">debates2023-04-17b.xml</a></td></tr>
<tr><td><a href="debates2023-05-02a.xml">debates2023-05-02a.xml</a></td></tr>
</table></body></html>"""


def serve_govinfo(server, key="K"):
    base = "/published/2023-04-01/2023-04-30"
    server.add(
        base,
        Reply(
            {
                "count": 2,
                "message": None,
                "nextPage": f"{server.url}{base}?offsetMark=NEXT&pageSize=100&collection=CREC",
                "previousPage": None,
                "packages": [
                    {
                        "packageId": "CREC-2023-04-17",
                        "dateIssued": "2023-04-17",
                        "docClass": "CREC",
                        "packageLink": f"{server.url}/packages/CREC-2023-04-17/summary",
                    }
                ],
            }
        ),
        query={"offsetMark": "*", "api_key": key, "collection": "CREC"},
    )
    server.add(
        base,
        Reply({"count": 2, "nextPage": None, "packages": [{"packageId": "CREC-2023-04-18"}]}),
        query={"offsetMark": "NEXT", "api_key": key},
    )
    for package, granules in {
        "CREC-2023-04-17": [
            {"granuleId": "CREC-2023-04-17-pt1-PgH1789", "granuleClass": "HOUSE"},
            {"granuleId": "CREC-2023-04-17-pt1-PgE300", "granuleClass": "EXTENSIONS"},
        ],
        "CREC-2023-04-18": [],
    }.items():
        server.add(
            f"/packages/{package}/granules",
            Reply({"count": len(granules), "nextPage": None, "granules": granules}),
            query={"api_key": key},
        )
    server.add(
        "/packages/CREC-2023-04-17/granules/CREC-2023-04-17-pt1-PgH1789/htm",
        Reply("Too many requests", status=429, headers={"Retry-After": "0"}),
        Reply(CREC_HTML, content_type="text/html"),
    )


def serve_twfy(server):
    server.add("/pwdata/scrapedxml/debates/", Reply(TWFY_INDEX, content_type="text/html"))
    server.add(
        "/pwdata/scrapedxml/debates/debates2023-04-17b.xml",
        Reply(TWFY_XML, content_type="text/xml"),
    )


CA_SPEECHES = [
    {
        "time": "2023-04-18 10:00:00",
        "attribution": {"en": "The Speaker", "fr": "Le Président"},
        "content": {"en": "<p>Order, please.</p>"},
        "procedural": False,
        "url": "/debates/2023/4/18/the-speaker-1/",
    },
    {
        "time": "2023-04-18 10:05:00",
        "attribution": {"en": "Elizabeth Example", "fr": "Elizabeth Example"},
        "content": {
            "en": "<p>Mr. Speaker, the forests of Vancouver Island are burning.</p>"
            "<p>We need a plan &amp; we need it now.</p>"
        },
        "procedural": False,
        "url": "/debates/2023/4/18/elizabeth-example-1/",
        "h1": {"en": "Statements by Members"},
        "h2": {"en": "Wildfires"},
    },
    {
        "time": "2023-04-18 10:06:00",
        "attribution": {"en": "Some Member"},
        "content": {"en": "<p>Motions.</p>"},
        "procedural": True,
        "url": "/debates/2023/4/18/some-member-1/",
    },
    {"time": "2023-04-18 10:07:00", "attribution": {"en": "Broken"}, "url": "/x/"},
]


def serve_openparliament(server):
    def debates(query, headers):
        assert headers.get("api-version") == "v1"
        if query.get("offset") == "1":
            return Reply({"objects": [{"url": "/debates/2023/4/19/"}], "pagination": {}})
        page = {"objects": [{"date": "2023-04-18", "number": "180", "url": "/debates/2023/4/18/"}]}
        page["pagination"] = {"next_url": "/debates/?date__range=x&offset=1&format=json"}
        return Reply(page)

    server.handle("/debates/", debates)
    server.add(
        "/speeches/",
        Reply({"objects": CA_SPEECHES, "pagination": {"next_url": None}}),
        query={"document": "/debates/2023/4/18/"},
    )
    server.add(
        "/speeches/",
        Reply({"objects": [], "pagination": {}}),
        query={"document": "/debates/2023/4/19/"},
    )


@pytest.fixture
def server(monkeypatch):
    monkeypatch.setenv("GOVINFO_API_KEY", "K")
    with FixtureServer() as srv:
        serve_govinfo(srv)
        serve_twfy(srv)
        serve_openparliament(srv)
        yield srv


def options(server, **kw):
    urls = {k: server.url for k in ("govinfo_url", "twfy_url", "openparliament_url")}
    return {**WINDOW, **urls, **kw}


def test_three_countries_end_to_end(server, tmp_path):
    source = CongressSource()
    records = list(source.fetch(options(server), tmp_path))
    by_speaker = {r.client_id: r for r in records}
    assert sorted(by_speaker) == [
        "Elizabeth Example",
        "Jane Example",
        "John Sample",
        "Mr. DeSAULNIER",
        "Mr. SMITH of Ohio",
    ]
    smith = by_speaker["Mr. SMITH of Ohio"]
    assert smith.text == (
        "I rise today to honor the volunteers of the Riverside Library, who have kept its "
        "doors open for thirty years.\nThey read to children every Saturday & they never ask "
        "for thanks."
    )
    assert smith.date == "2023-04-17" and smith.label == "USA"
    assert smith.licence == "us-government-public-domain"
    assert smith.extra["title"] == "Honoring The Riverside Library Volunteers"
    assert by_speaker["Mr. DeSAULNIER"].text == (
        "I thank the gentleman for yielding. Our communities depend on libraries more than ever "
        "before."
    )
    assert by_speaker["John Sample"].text.endswith(
        "\nWe have given £300 million to local authorities this year."
    )
    assert by_speaker["Jane Example"].extra["title"] == "Rural Bus Services"
    may = by_speaker["Elizabeth Example"]
    assert (
        may.text == "the forests of Vancouver Island are burning.\nWe need a plan & we need it now."
    )
    assert may.date == "2023-04-18" and may.extra["title"] == "Wildfires"
    assert source.stats["skipped: short unanimous-consent request"] == 1
    assert source.stats["skipped: does not address the chair"] == 1
    assert source.stats["skipped: presiding officer"] == 2  # Mr Speaker (UK), The Speaker (CA)
    assert source.stats["skipped: procedural"] == 1
    assert source.stats["malformed: speech without speaker, content or time"] == 1
    # Superseded TheyWorkForYou versions and the EXTENSIONS granule are never fetched.
    paths = {h.path for h in server.hits}
    assert "/pwdata/scrapedxml/debates/debates2023-04-17a.xml" not in paths
    assert not any("PgE300" in p for p in paths)
    assert all(h.query.get("api_key") == "K" for h in server.hits if "packages" in h.path)


def test_resume_makes_no_requests_and_key_is_never_stored(server, tmp_path):
    first = list(CongressSource().fetch(options(server), tmp_path))
    hits = len(server.hits)
    second = list(CongressSource().fetch(options(server), tmp_path))
    assert first == second and len(server.hits) == hits
    for path in tmp_path.rglob("*"):
        assert "K&" not in path.name and "api_key" not in path.name


def test_client_rules(server, tmp_path):
    records = list(
        CongressSource().fetch(options(server, origin="uk", client_by="country_speaker"), tmp_path)
    )
    assert {r.client_id for r in records} == {"GBR:Jane Example", "GBR:John Sample"}
    speech = list(
        CongressSource().fetch(options(server, origin="ca", client_by="speech"), tmp_path)
    )
    assert [r.client_id for r in speech] == ["/debates/2023/4/18/elizabeth-example-1/"]


def test_missing_govinfo_key_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.delenv("GOVINFO_API_KEY", raising=False)
    with pytest.raises(FetchError, match="GOVINFO_API_KEY"):
        list(CongressSource().fetch({"origin": "us"}, tmp_path))


def test_hub_schema_local_files(tmp_path):
    rows = [
        {
            "url": "https://api.govinfo.gov/x",
            "date_str": "2024-01-10",
            "title": "T",
            "speaker": "Mr. DOE",
            "data": "Mr. Speaker, I rise in support of this bill today.",
            "chamber": "HOUSE",
            "country": "USA",
        },
        {"url": "u", "date_str": "2024-01-11", "speaker": "", "data": "x", "country": "CA"},
    ]
    path = tmp_path / "congressional_data_2024-01.json"
    path.write_text(json.dumps(rows))  # the LargeFedBench monthly files are JSON arrays
    source = CongressSource()
    records = list(source.fetch({"origin": "hub", "files": str(path)}, tmp_path / "c"))
    assert [(r.client_id, r.text, r.date) for r in records] == [
        ("Mr. DOE", "I rise in support of this bill today.", "2024-01-10")
    ]
    assert source.stats["malformed: missing speaker"] == 1


def test_cleaning_rules():
    assert letter_share("Roll call: 212-201.") < 0.7 <= letter_share("We agree.")
    text = "Madam President, I yield the floor. {time}  1415 Thank you (12-3; 4-5-6). Good."
    assert clean_speech(text) == "Good."
    assert clean_speech("=== NOTE === We debate. === END NOTE ===").strip() == "We debate."
    assert is_presiding_officer("Madam Deputy Speaker") and is_presiding_officer(
        "The SPEAKER pro tempore"
    )
    assert not is_presiding_officer("Jane Example")
    turns = list(crec_turns("  Mr. VAN HOLLEN. Mr. President, a short remark.\n"))
    assert [t.speaker for t in turns] == ["Mr. VAN HOLLEN"]
