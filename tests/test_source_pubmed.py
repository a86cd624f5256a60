"""PubMed source: E-utilities esearch/efetch with history, paging, expiry; MeSH labels."""

import itertools

import pytest
from http_fixture import FixtureServer, Reply

from datasets_builders.http import FetchError
from datasets_builders.sources.pubmed import PubMedSource


def article(pmid, abstract=True, mesh=()):
    abstract_xml = (
        "<Abstract><AbstractText Label='BACKGROUND'>Background of "
        f"{pmid}.</AbstractText><AbstractText Label='RESULTS'>Results <sup>2</sup> "
        "text.</AbstractText></Abstract>"
        if abstract
        else ""
    )
    headings = "".join(
        f"<MeshHeading><DescriptorName UI='D{i}' MajorTopicYN='{major}'>{name}</DescriptorName>"
        f"<QualifierName UI='Q1' MajorTopicYN='{qualifier}'>drug therapy</QualifierName>"
        "</MeshHeading>"
        for i, (name, major, qualifier) in enumerate(mesh)
    )
    return (
        "<PubmedArticle><MedlineCitation Status='MEDLINE' Owner='NLM'>"
        f"<PMID Version='1'>{pmid}</PMID><Article PubModel='Print-Electronic'>"
        "<Journal><Title>Journal of Tests</Title></Journal>"
        f"<ArticleTitle>A study of <i>{pmid}</i>.</ArticleTitle>{abstract_xml}"
        "<Language>eng</Language></Article>"
        f"<MeshHeadingList>{headings}</MeshHeadingList></MedlineCitation>"
        "<PubmedData><PublicationStatus>ppublish</PublicationStatus></PubmedData></PubmedArticle>"
    )


PAGES = {
    "0": [
        article("111", mesh=[("Breast Neoplasms", "N", "Y"), ("Humans", "N", "N")]),
        article("112", abstract=False),
    ],
    "2": [article("111"), article("113", mesh=[("Anatomy", "Y", "N")])],
}
TREES = "Breast Neoplasms;C04.588.180\nBreast Neoplasms;C17.800.090.500\nAnatomy;A01\nHumans;M01\n"


class Eutils:
    """A history server: each esearch issues a new WebEnv; old ones expire."""

    def __init__(self, server):
        self.webenv = None
        self.searches = 0
        server.handle("/esearch.fcgi", self.esearch)
        server.handle("/efetch.fcgi", self.efetch)

    def esearch(self, query, headers):
        assert query["usehistory"] == "y" and query["tool"] == "fedsynth"
        assert query["mindate"] == query["maxdate"] and query["datetype"] == "pdat"
        self.searches += 1
        self.webenv = f"MCID_{self.searches}"
        count = 4 if query["mindate"] == "2023/08/01" else 0
        return Reply(
            f"<?xml version='1.0'?><eSearchResult><Count>{count}</Count><RetMax>0</RetMax>"
            f"<RetStart>0</RetStart><QueryKey>1</QueryKey><WebEnv>{self.webenv}</WebEnv>"
            "<IdList/></eSearchResult>",
            content_type="text/xml",
        )

    def efetch(self, query, headers):
        if query["WebEnv"] != self.webenv:
            return Reply(
                "<eFetchResult><ERROR>Unable to obtain query #1</ERROR></eFetchResult>",
                content_type="text/xml",
            )
        assert query["retmax"] == "2" and query["retmode"] == "xml"
        book = "<PubmedBookArticle/>" if query["retstart"] == "2" else ""
        body = "".join(PAGES[query["retstart"]]) + book
        return Reply(f"<PubmedArticleSet>{body}</PubmedArticleSet>", content_type="text/xml")


OPTIONS = {"start": "2023-08-01", "end": "2023-08-02", "batch": 2, "requests_per_second": 1000}


@pytest.fixture
def server():
    with FixtureServer() as srv:
        srv.eutils = Eutils(srv)
        yield srv


def fetch(server, tmp_path, **kw):
    source = PubMedSource()
    records = list(source.fetch({**OPTIONS, "base_url": server.url, **kw}, tmp_path))
    return source, records


def test_days_pages_dedupe_and_mesh_roots(server, tmp_path):
    trees = tmp_path / "mtrees2024.bin"
    trees.write_text(TREES)
    source, records = fetch(server, tmp_path, label="mesh_roots", mesh_trees=str(trees))
    assert [(r.source_id, r.date, r.label) for r in records] == [
        ("pmid:111", "2023-08-01", "C"),
        ("pmid:113", "2023-08-01", "A"),
    ]
    first = records[0]
    assert first.text == "Background of 111.\nResults 2 text."
    assert (
        first.extra["title"] == "A study of 111."
        and first.extra["mesh_major"] == "Breast Neoplasms"
    )
    assert first.extra["mesh_C"] == 1 and first.extra["mesh_M"] == 0
    assert source.stats["skipped: no abstract"] == 1
    assert source.stats["skipped: book articles"] == 1
    assert source.stats["esearch count"] == 4
    assert [h.query["mindate"] for h in server.hits_for("/esearch.fcgi")] == [
        "2023/08/01",
        "2023/08/02",
    ]


def test_resume_reuses_pages_and_refreshes_an_expired_webenv(server, tmp_path):
    _, first = fetch(server, tmp_path, text="title_abstract")
    assert first[0].text.startswith("A study of 111.\nBackground")
    hits = len(server.hits)
    _, again = fetch(server, tmp_path, text="title_abstract")
    assert again == first and len(server.hits) == hits  # everything from the cache
    # Lose one cached page: the stored WebEnv has expired, so one new esearch is needed.
    cache_files = sorted((tmp_path / "http").rglob("*.body"), key=lambda p: p.stat().st_mtime)
    efetch_pages = [p for p in cache_files if b"PubmedArticleSet" in p.read_bytes()]
    efetch_pages[-1].unlink()
    _, resumed = fetch(server, tmp_path, text="title_abstract")
    assert resumed == first
    new = server.hits[hits:]
    assert [h.path for h in new] == ["/esearch.fcgi", "/efetch.fcgi"]


def test_esearch_error_is_reported(tmp_path):
    with FixtureServer() as srv:
        srv.add(
            "/esearch.fcgi",
            Reply("<eSearchResult><ERROR>Invalid query syntax</ERROR></eSearchResult>"),
        )
        with pytest.raises(FetchError, match="Invalid query syntax"):
            fetch(srv, tmp_path)


def test_mesh_csv_schema(tmp_path):
    roots = "A,B,C,D,E,F,G,H,I,J,L,M,N,Z"
    path = tmp_path / "PubMed Multi Label Text Classification Dataset Processed.csv"
    path.write_text(
        f"Title,abstractText,meshMajor,pmid,meshid,meshroot,{roots}\n"
        "T1,Abstract one.,\"['Humans']\",1,x,y,0,1,0,0,0,0,0,0,0,0,0,1,0,0\n"
        "T2,Abstract two.,\"['Neoplasms']\",2,x,y,1,0,1,0,0,0,0,0,0,0,0,0,1,0\n"
        "T3,,[],3,x,y,0,0,0,0,0,0,0,0,0,0,0,0,0,0\n"
    )
    source = PubMedSource()
    records = list(
        source.fetch({"origin": "hub", "files": str(path), "label": "mesh_roots"}, tmp_path)
    )
    assert [(r.source_id, r.label) for r in records] == [("pmid:1", "M"), ("pmid:2", "A,C,N")]
    assert source.stats["malformed: missing pmid or abstractText"] == 1
    coded = source.fetch(
        {"origin": "hub", "files": str(path), "label": "mesh_indicators"}, tmp_path
    )
    assert next(iter(coded)).label == (  # paper 001's code string for pmid 1 (root M only)
        "Anatomy: 0, Diseases: 0, Chemicals and Drugs: 0, Named Groups: 1, Health Care: 0"
    )


def test_ncbi_rate_limit_tool_email_and_key(server, tmp_path, monkeypatch):
    monkeypatch.setenv("NCBI_EMAIL", "me@example.org")
    monkeypatch.delenv("NCBI_API_KEY", raising=False)
    options = {"start": "2023-08-02", "end": "2023-08-04", "base_url": server.url}
    list(PubMedSource().fetch(options, tmp_path / "a"))  # 3 esearches at NCBI's 3/s
    times = [h.at for h in server.hits]
    assert len(times) == 3 and min(b - a for a, b in itertools.pairwise(times)) >= 0.3
    assert all(h.query["email"] == "me@example.org" for h in server.hits)
    assert all("api_key" not in h.query for h in server.hits)
    monkeypatch.setenv("NCBI_API_KEY", "SECRET")
    list(PubMedSource().fetch({**options, "start": "2023-08-05", "end": "2023-08-05"}, tmp_path))
    assert server.hits[-1].query["api_key"] == "SECRET"
    assert not any(b"SECRET" in p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())
