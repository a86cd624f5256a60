"""PubMed abstracts in a date window via NCBI E-utilities (Aug-PE PubMed; paper 001 MeSH).

Origins (``origin``):

* ``eutils`` (default): NCBI's public E-utilities. For every day of ``start..end``:
  ``esearch.fcgi?db=pubmed&term=...&datetype=...&mindate=D&maxdate=D&usehistory=y&retmax=0``
  (the day's ``Count`` and a history-server ``WebEnv``/``QueryKey``), then
  ``efetch.fcgi?db=pubmed&query_key=..&WebEnv=..&retstart=..&retmax=batch&retmode=xml``
  pages of ``PubmedArticleSet`` XML. Querying one day at a time keeps each history set
  small, makes resuming granular, and dates every article by the day NCBI matched it on
  for ``datetype`` (``pdat`` publication date, ``edat`` Entrez date, ``mdat`` modification
  date): exactly the contamination-relevant date. Requests carry ``tool`` and ``email``
  (env ``NCBI_EMAIL`` or option) and the key from env ``NCBI_API_KEY`` when set; the client
  keeps to NCBI's limit of 3 requests/s (10/s with a key). efetch pages are cached under
  a key without the ``WebEnv`` (which expires), so a resumed build refetches only missing
  pages, after one fresh esearch. Articles are deduplicated by PMID.
* ``hub``: the multi-label MeSH CSV used by paper 001 (Kaggle "Multi-label classification of
  PubMed articles", HF mirror ``owaiskha9654/PubMed_MultiLabel_Text_Classification_Dataset_MeSH``;
  columns ``Title``, ``abstractText``, ``meshMajor``, ``pmid``, ``meshroot`` and one 0/1
  column per MeSH tree root ``A`` ... ``Z``), or local ``files`` in that schema.

Labels (``label``): ``none``; ``mesh_major`` (the article's MeSH major topics, ``;``-joined);
``mesh_roots`` (paper 001's control codes: which of the roots ``mesh_roots``, default
A Anatomy, C Diseases, D Chemicals and Drugs, M Named Groups, N Health Care, the major
topics fall under, ``,``-joined, ``none`` when none). For E-utilities, roots come from the
NLM MeSH tree file ``mesh_trees`` (``mtreesYYYY.bin``, lines ``Name;TreeNumber``; a path
or URL, fetched through the cache). ``extra`` holds a 0/1 field ``mesh_<root>`` per root.

Paper recipes: Aug-PE / POPri PubMed: abstracts of 2023-08-01..2023-08-07, one document per
client (central DP), whole abstracts. Paper 001: the MeSH CSV, ``label=mesh_indicators``
(its control-code strings, ``Anatomy: 1, Diseases: 0, Chemicals and Drugs: 1, Named
Groups: 1, Health Care: 0``; ``mesh_roots`` holds the same facts as ``A,D,M``).
"""

from __future__ import annotations

import datetime as dt
import os
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from datasets_builders.http import (
    FetchError,
    HttpClient,
    MalformedResponseError,
    parse_xml,
)
from datasets_builders.hub import HubDataset, expand_files, files_revision, iter_rows
from datasets_builders.source import Source, SourceRecord
from datasets_builders.sources._common import (
    NETWORK_OPTIONS,
    Option,
    RecordPolicy,
    make_client,
    parse_options,
)

EUTILS = "https://eutils.ncbi.nlm.nih.gov/entrez/eutils"
MESH_TREES = "https://nlmpubs.nlm.nih.gov/projects/mesh/MESH_FILES/meshtrees/mtrees2024.bin"
HUB = HubDataset("owaiskha9654/PubMed_MultiLabel_Text_Classification_Dataset_MeSH")
LICENCE = "pubmed-abstract-publisher-copyright"
PAPER001_ROOTS = ["A", "C", "D", "M", "N"]
# Root names as paper 001's control-code listings print them ("Named Groups" for M).
ROOT_NAMES = {
    "A": "Anatomy",
    "C": "Diseases",
    "D": "Chemicals and Drugs",
    "M": "Named Groups",
    "N": "Health Care",
}
ROOT_LABELS = ("mesh_roots", "mesh_indicators")

OPTIONS = (
    Option("origin", "eutils", "eutils (NCBI E-utilities) or hub (MeSH multi-label CSV)"),
    Option("term", "hasabstract", "PubMed query term (ANDed with the date of each day)"),
    Option("start", "2023-08-01", "first day queried", "date"),
    Option("end", "2023-08-07", "last day queried", "date"),
    Option("datetype", "pdat", "date field the window applies to: pdat, edat or mdat"),
    Option("batch", 500, "efetch page size (retmax)", "int"),
    Option("text", "abstract", "record text: abstract or title_abstract"),
    Option("label", "none", "none, mesh_major, mesh_roots or mesh_indicators"),
    Option("mesh_roots", PAPER001_ROOTS, "MeSH tree roots used by label=mesh_roots", "list"),
    Option("mesh_trees", MESH_TREES, "path or URL of the NLM MeSH trees file (mtrees*.bin)"),
    Option("email", None, "contact e-mail sent to NCBI (default: env NCBI_EMAIL)"),
    Option("requests_per_second", None, "override NCBI's limit (3/s, 10/s with a key)", "float"),
    Option("base_url", EUTILS, "E-utilities base URL"),
    Option("revision", HUB.revision, "hub revision of the MeSH CSV dataset"),
    Option("files", None, "local files in the MeSH CSV schema (origin hub)", "list"),
    *NETWORK_OPTIONS,
)


class PubMedSource(Source):
    name: ClassVar[str] = "pubmed"
    description: ClassVar[str] = "PubMed abstracts by date via NCBI E-utilities (+ MeSH labels)"
    date_field: ClassVar[str | None] = "pubmed_date"
    options: ClassVar[tuple[Option, ...]] = OPTIONS
    split_defaults: ClassVar[dict[str, Any]] = {
        "date_start": "2023-08-01",
        "date_end": "2023-08-07",
        "partition": "document",
        "span_length": None,
    }

    def __init__(self) -> None:
        self.stats: Counter[str] = Counter()

    def revision(self, options: dict[str, Any]) -> str:
        opts = parse_options(options, OPTIONS, self.name)
        if opts["origin"] == "eutils":
            return (
                f"{opts['base_url']} term={opts['term']!r} {opts['datetype']} "
                f"{opts['start']}..{opts['end']}"
            )
        if opts["files"]:
            return files_revision(expand_files(opts["files"]))
        return HubDataset(HUB.repo, revision=opts["revision"]).describe()

    def fetch(self, options: dict[str, Any], cache_dir: Path) -> Iterator[SourceRecord]:
        opts = parse_options(options, OPTIONS, self.name)
        if opts["label"] not in {"none", "mesh_major", *ROOT_LABELS}:
            raise ValueError(
                "pubmed: label must be none, mesh_major, mesh_roots or mesh_indicators"
            )
        if opts["text"] not in {"abstract", "title_abstract"}:
            raise ValueError("pubmed: text must be abstract or title_abstract")
        self.stats = Counter()
        policy = RecordPolicy(self.name, opts["on_malformed"], self.stats)
        if opts["origin"] == "hub":
            yield from self._hub(opts, Path(cache_dir), policy)
        elif opts["origin"] == "eutils":
            yield from self._eutils(opts, Path(cache_dir), policy)
        else:
            raise ValueError("pubmed: origin must be eutils or hub")
        policy.summary()

    # -- E-utilities ------------------------------------------------------------------------

    def _eutils(
        self, opts: dict[str, Any], cache_dir: Path, policy: RecordPolicy
    ) -> Iterator[SourceRecord]:
        if opts["datetype"] not in {"pdat", "edat", "mdat"}:
            raise ValueError("pubmed: datetype must be pdat, edat or mdat")
        key = os.environ.get("NCBI_API_KEY", "").strip()
        rate = opts["requests_per_second"] or (10.0 if key else 3.0)
        client = make_client(cache_dir, opts, min_interval=1.0 / rate)
        common = {
            "db": "pubmed",
            "tool": "fedsynth",
            "email": opts["email"] or os.environ.get("NCBI_EMAIL") or None,
            "api_key": key or None,
        }
        trees = self._mesh_trees(client, opts) if opts["label"] in ROOT_LABELS else {}
        seen: set[str] = set()
        day = dt.date.fromisoformat(opts["start"])
        while day <= dt.date.fromisoformat(opts["end"]):
            for article in self._day(client, opts, common, day):
                record = self._article(article, day.isoformat(), opts, trees, policy)
                if record is not None and record.source_id not in seen:
                    seen.add(record.source_id)
                    yield record
            day += dt.timedelta(days=1)

    def _day(
        self, client: HttpClient, opts: dict[str, Any], common: dict[str, Any], day: dt.date
    ) -> Iterator[ET.Element]:
        """Every ``PubmedArticle`` element matched on ``day``, page by page."""
        stamp = day.strftime("%Y/%m/%d")
        query = {
            **common,
            "term": opts["term"],
            "datetype": opts["datetype"],
            "mindate": stamp,
            "maxdate": stamp,
            "usehistory": "y",
            "retmax": 0,
        }
        ident = f"{opts['base_url']}|{opts['term']}|{opts['datetype']}|{stamp}"
        search_url = f"{opts['base_url'].rstrip('/')}/esearch.fcgi"
        fetch_url = f"{opts['base_url'].rstrip('/')}/efetch.fcgi"
        search_key = f"pubmed-esearch|{ident}"

        def search() -> tuple[int, dict[str, str]]:
            body = client.get_bytes(search_url, query, use_cache=False)
            result = _search_result(body, search_url)
            client.cache.put(search_key, body)
            return result

        def efetch(history: dict[str, str], start: int) -> bytes | None:
            params = {**common, **history, "retstart": start, "retmax": opts["batch"]}
            page = client.get_bytes(fetch_url, {**params, "retmode": "xml"}, use_cache=False)
            # An expired WebEnv gives an <eFetchResult><ERROR> document instead of articles.
            return page if parse_xml(page, fetch_url).tag == "PubmedArticleSet" else None

        # Today's (or a future day's) results can still change: do not read their cache.
        settled = day < dt.date.today()
        cached = client.cache.get(search_key) if settled else None
        fresh = cached is None
        count, history = search() if fresh else _search_result(cached, search_url)
        self.stats["esearch count"] += count
        for start in range(0, count, opts["batch"]):
            page_key = f"pubmed-efetch|{ident}|{start}|{opts['batch']}"
            page = client.cache.get(page_key) if settled else None
            if page is None:
                if not fresh:  # the cached WebEnv has expired by now: search again
                    count, history = search()
                    fresh = True
                page = efetch(history, start)
                if page is None:
                    count, history = search()
                    page = efetch(history, start)
                if page is None:
                    raise FetchError(f"NCBI efetch for {stamp} at {start} keeps failing")
                client.cache.put(page_key, page)
            root = parse_xml(page, fetch_url)
            self.stats["skipped: book articles"] += len(root.findall("PubmedBookArticle"))
            yield from root.findall("PubmedArticle")

    def _article(
        self,
        article: ET.Element,
        day: str,
        opts: dict[str, Any],
        trees: dict[str, set[str]],
        policy: RecordPolicy,
    ) -> SourceRecord | None:
        pmid = (article.findtext("MedlineCitation/PMID") or "").strip()
        if not pmid:
            policy.malformed(f"article on {day}", "no PMID")
            return None
        art = article.find("MedlineCitation/Article")
        if art is None:
            policy.malformed(f"PMID {pmid}", "no Article element")
            return None
        paragraphs = [_text(p) for p in art.findall("Abstract/AbstractText")]
        abstract = "\n".join(p for p in paragraphs if p)
        if not abstract:
            policy.skip("no abstract")
            return None
        title = _text(art.find("ArticleTitle"))
        text = f"{title}\n{abstract}" if opts["text"] == "title_abstract" and title else abstract
        major = mesh_major_topics(article)
        extra: dict[str, Any] = {
            "pmid": pmid,
            "title": title,
            "journal": _text(art.find("Journal/Title")),
            "language": _text(art.find("Language")),
            "mesh_major": ";".join(major),
        }
        label = None
        if opts["label"] == "mesh_major":
            label = ";".join(major) or "none"
        elif opts["label"] in ROOT_LABELS:
            roots = {t[0] for name in major for t in trees.get(name, ())}
            label = self._roots(roots, opts, extra)
            if not major:
                self.stats["no MeSH major topics (not yet indexed?)"] += 1
        return SourceRecord(
            text=text,
            source_id=f"pmid:{pmid}",
            date=day,
            label=label,
            licence=LICENCE,
            extra=extra,
        )

    @staticmethod
    def _roots(present: set[str], opts: dict[str, Any], extra: dict[str, Any]) -> str:
        """``mesh_roots``: the present roots, ``,``-joined; ``mesh_indicators``: paper 001's
        code string, every root's indicator (``Anatomy: 1, Diseases: 0, ...``)."""
        wanted = opts["mesh_roots"]
        extra.update({f"mesh_{root}": int(root in present) for root in wanted})
        if opts["label"] == "mesh_indicators":
            return ", ".join(f"{ROOT_NAMES.get(r, r)}: {int(r in present)}" for r in wanted)
        return ",".join(root for root in wanted if root in present) or "none"

    def _mesh_trees(self, client: HttpClient, opts: dict[str, Any]) -> dict[str, set[str]]:
        """Descriptor name -> tree numbers, from an NLM ``mtrees*.bin`` file (path or URL)."""
        where = opts["mesh_trees"]
        remote = "://" in where
        text = client.get_text(where) if remote else Path(where).read_text(encoding="utf-8")
        trees: dict[str, set[str]] = {}
        for line in text.splitlines():
            name, _, number = line.rpartition(";")
            if name and number:
                trees.setdefault(name.strip(), set()).add(number.strip())
        if not trees:
            raise MalformedResponseError(f"pubmed: {where} is not a MeSH trees file")
        return trees

    # -- paper 001's MeSH CSV ---------------------------------------------------------------

    def _hub(
        self, opts: dict[str, Any], cache_dir: Path, policy: RecordPolicy
    ) -> Iterator[SourceRecord]:
        hub = HubDataset(HUB.repo, revision=opts["revision"])
        seen: set[str] = set()
        for index, row in enumerate(iter_rows(hub, local_files=opts["files"], cache_dir=cache_dir)):
            pmid = str(row.get("pmid") or "").strip()
            abstract = str(row.get("abstractText") or "").strip()
            if not pmid or not abstract:
                policy.malformed(f"row {index}", "missing pmid or abstractText")
                continue
            if pmid in seen:
                policy.skip("duplicate pmid")
                continue
            seen.add(pmid)
            title = str(row.get("Title") or "").strip()
            text = (
                f"{title}\n{abstract}" if opts["text"] == "title_abstract" and title else abstract
            )
            extra: dict[str, Any] = {
                "pmid": pmid,
                "title": title,
                "mesh_major": str(row.get("meshMajor") or ""),
            }
            label = None
            if opts["label"] in ROOT_LABELS:
                present = {
                    r for r in opts["mesh_roots"] if str(row.get(r, "0")).strip() in {"1", "1.0"}
                }
                label = self._roots(present, opts, extra)
            elif opts["label"] == "mesh_major":
                label = extra["mesh_major"] or "none"
            yield SourceRecord(
                text=text, source_id=f"pmid:{pmid}", label=label, licence=LICENCE, extra=extra
            )


def mesh_major_topics(article: ET.Element) -> list[str]:
    """Descriptor names that are major topics (the descriptor or one of its qualifiers)."""
    major = []
    for heading in article.findall("MedlineCitation/MeshHeadingList/MeshHeading"):
        descriptor = heading.find("DescriptorName")
        if descriptor is None:
            continue
        flags = [descriptor.get("MajorTopicYN")]
        flags += [q.get("MajorTopicYN") for q in heading.findall("QualifierName")]
        if "Y" in flags:
            major.append(_text(descriptor))
    return major


def _search_result(body: bytes, url: str) -> tuple[int, dict[str, str]]:
    """``Count`` and the history parameters of an esearch reply (errors raise)."""
    root = parse_xml(body, url)
    error = root.findtext("ERROR")
    if error:
        raise FetchError(f"NCBI esearch error: {error}")
    try:
        count = int(root.findtext("Count") or "")
    except ValueError as exc:
        raise MalformedResponseError(f"esearch reply from {url} has no Count") from exc
    history = {
        "WebEnv": root.findtext("WebEnv") or "",
        "query_key": root.findtext("QueryKey") or "",
    }
    if count and not all(history.values()):
        raise MalformedResponseError(f"esearch reply from {url} has no WebEnv/QueryKey")
    return count, history


def _text(element: ET.Element | None) -> str:
    return " ".join("".join(element.itertext()).split()) if element is not None else ""
