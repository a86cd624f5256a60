"""bioRxiv abstracts (POPri / LargeFedBench), from the bioRxiv API or the hub dataset.

Origins (``origin``):

* ``api`` (default): the public ``details`` endpoint,
  ``{base_url}/details/{server}/{start}/{end}/{cursor}/json``, paged with the API's own
  counters (``messages[0].count`` records on this page, ``messages[0].total`` in the
  window; the cursor advances by the count actually received, so no page is skipped and no
  page size is assumed). Pages of windows that end before today are cached, so an
  interrupted build resumes.
* ``hub``: ``hazylavender/biorxiv-abstract`` (revision ``revision``), or local files in the
  same schema via ``files`` (the API record's columns: ``doi``, ``title``, ``authors``,
  ``author_corresponding``, ``date``, ``version``, ``license``, ``category``, ``abstract``...).

Versions. The API returns one record per *version* posted in the window. Papers are
deduplicated by DOI and dated by their **first version** (``date`` = v1 posting date), so a
paper first posted before a model's cut-off is not taken as uncontaminated because its v2
falls inside the window. When the earliest version seen is not v1, the v1 date is looked up
with the DOI endpoint ``{base_url}/details/{server}/{doi}/na/json`` (``resolve_v1``). The
text is the abstract of the latest version seen; its licence must be one of ``licences``
(default CC BY and CC0, the ones that may be redistributed; POPri kept all five CC
variants: pass ``licences=cc_by_nc_nd,cc_by_nd,cc_by_nc,cc_by,cc0`` for that).

Clients (``client_by``): ``doi`` (default; POPri treats each abstract as one client, split
into 64-token samples by the pipeline), ``author_corresponding`` or ``category``.
Label: the bioRxiv subject category.

Paper recipe (POPri, App. F; ``split_defaults``): window 2023-04-01..2024-08-31 (the
pipeline's date window, on the v1 date), one client per abstract, 64-token spans; the
defaults reproduce it with the redistributable licences. The API is queried for the source
options ``start``..``end``: keep them equal to the pipeline's window.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, ClassVar

from datasets_builders.http import HttpClient, MalformedResponseError
from datasets_builders.hub import HubDataset, expand_files, files_revision, iter_rows
from datasets_builders.source import Source, SourceRecord
from datasets_builders.sources._common import (
    NETWORK_OPTIONS,
    Option,
    RecordPolicy,
    make_client,
    parse_options,
    require,
)

HUB = HubDataset("hazylavender/biorxiv-abstract")
API = "https://api.biorxiv.org"

OPTIONS = (
    Option("origin", "api", "'api' (bioRxiv details API) or 'hub' (HF dataset / local files)"),
    Option("start", "2023-04-01", "first posting date requested from the API", "date"),
    Option("end", "2024-08-31", "last posting date requested from the API", "date"),
    Option("server", "biorxiv", "API server: biorxiv or medrxiv"),
    Option("licences", ["cc_by", "cc0"], "licences kept (API codes), comma separated", "list"),
    Option("client_by", "doi", "client id: doi, author_corresponding or category"),
    Option("resolve_v1", True, "look up the v1 date of papers whose v1 is not in the data", "bool"),
    Option("base_url", API, "bioRxiv API base URL"),
    Option("revision", HUB.revision, "hub revision (commit SHA or tag) of the HF dataset"),
    Option("files", None, "local files in the hub schema instead of the hub", "list"),
    *NETWORK_OPTIONS,
)
_FIELDS = ("doi", "date", "version", "abstract")
_CLIENT_FIELDS = {"doi", "author_corresponding", "category"}
# client_by -> (one client in words, is it one person)
_CLIENT_UNITS = {
    "doi": ("one abstract (an author writes many: not a person)", False),
    "author_corresponding": ("one corresponding author", True),
    "category": ("one subject category (many authors: not a person)", False),
}


class BiorxivSource(Source):
    name: ClassVar[str] = "biorxiv"
    description: ClassVar[str] = (
        "bioRxiv abstracts (LargeFedBench), deduplicated by DOI and dated by version 1"
    )
    date_field: ClassVar[str | None] = "v1_posting_date"
    options: ClassVar[tuple[Option, ...]] = OPTIONS
    split_defaults: ClassVar[dict[str, Any]] = {
        "date_start": "2023-04-01",
        "date_end": "2024-08-31",
        "partition": "natural",
        "span_length": 64,
    }

    def __init__(self) -> None:
        self.stats: Counter[str] = Counter()

    def revision(self, options: dict[str, Any]) -> str:
        opts = parse_options(options, OPTIONS, self.name)
        if opts["origin"] == "api":
            return f"{opts['base_url']}/details/{opts['server']} {opts['start']}..{opts['end']}"
        if opts["files"]:
            return files_revision(expand_files(opts["files"]))
        return HubDataset(HUB.repo, revision=opts["revision"]).describe()

    def client_unit(self, options: dict[str, Any]) -> tuple[str, bool]:
        rule = parse_options(options, OPTIONS, self.name)["client_by"]
        return _CLIENT_UNITS.get(rule, (f"one {rule}", False))

    def fetch(self, options: dict[str, Any], cache_dir: Path) -> Iterator[SourceRecord]:
        opts = parse_options(options, OPTIONS, self.name)
        if opts["client_by"] not in _CLIENT_FIELDS:
            raise ValueError(f"biorxiv: client_by must be one of {sorted(_CLIENT_FIELDS)}")
        if opts["origin"] not in {"api", "hub"}:
            raise ValueError("biorxiv: origin must be 'api' or 'hub'")
        self.stats = Counter()
        policy = RecordPolicy(self.name, opts["on_malformed"], self.stats)
        client = make_client(cache_dir, opts)
        if opts["origin"] == "api":
            raw: Iterable[dict[str, Any]] = self._api_records(client, opts)
        else:
            hub = HubDataset(HUB.repo, revision=opts["revision"])
            raw = iter_rows(hub, local_files=opts["files"], cache_dir=cache_dir)
        papers = group_versions(raw, policy)
        for doi in sorted(papers):
            record = self._paper(doi, papers[doi], client, opts, policy)
            if record is not None:
                yield record
        policy.summary()

    # -- API paging ---------------------------------------------------------------------

    def _api_records(self, client: HttpClient, opts: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """Every record of the window, page by page, advancing by the API's own counts."""
        base = f"{opts['base_url'].rstrip('/')}/details/{opts['server']}"
        # A window that reaches today can still grow: do not cache its pages.
        use_cache = dt.date.fromisoformat(opts["end"]) < dt.date.today()
        cursor, total = 0, None
        while total is None or cursor < total:
            url = f"{base}/{opts['start']}/{opts['end']}/{cursor}/json"
            page = client.get_json(url, use_cache=use_cache)
            message = _message(page, url)
            status = str(message.get("status", "ok")).lower()
            if status != "ok":
                if cursor == 0 and "no posts" in status:
                    return  # an empty window
                raise MalformedResponseError(f"bioRxiv API says {status!r} at {url}")
            collection = page.get("collection")
            if not isinstance(collection, list):
                raise MalformedResponseError(f"bioRxiv page {url} has no 'collection' list")
            total = _as_int(message.get("total"), "total", url)
            count = _as_int(message.get("count", len(collection)), "count", url)
            if count != len(collection):
                raise MalformedResponseError(
                    f"bioRxiv page {url} announces {count} records but holds {len(collection)}"
                )
            self.stats["api records"] += count
            yield from collection
            if count == 0:
                if cursor < total:
                    raise MalformedResponseError(
                        f"bioRxiv API returned an empty page at cursor {cursor} of {total}"
                    )
                break
            cursor += count

    def _v1_date(self, doi: str, client: HttpClient, opts: dict[str, Any]) -> str | None:
        """Posting date of version 1 from the DOI endpoint (None when the API lacks it)."""
        url = f"{opts['base_url'].rstrip('/')}/details/{opts['server']}/{doi}/na/json"
        page = client.get_json(url)
        versions = [
            r for r in page.get("collection") or [] if isinstance(r, dict) and r.get("date")
        ]
        self.stats["v1 lookups"] += 1
        firsts = [r for r in versions if str(r.get("version")) == "1"]
        candidates = firsts or versions
        return min(str(r["date"]) for r in candidates) if candidates else None

    # -- one paper ----------------------------------------------------------------------

    def _paper(
        self,
        doi: str,
        versions: dict[int, dict[str, Any]],
        client: HttpClient,
        opts: dict[str, Any],
        policy: RecordPolicy,
    ) -> SourceRecord | None:
        latest = versions[max(versions)]
        licence = str(latest.get("license") or "").strip().lower()
        if licence not in opts["licences"]:
            policy.skip(f"licence {licence or 'none'}")
            return None
        first = min(versions)
        v1_date: str | None = str(versions[first]["date"])
        if first != 1:
            if opts["resolve_v1"]:
                v1_date = self._v1_date(doi, client, opts)
            else:
                self.stats["v1 date unresolved (earliest version seen used)"] += 1
            if v1_date is None:
                policy.skip("v1 date unknown")
                return None
        client_id = str(latest.get(opts["client_by"]) or "").strip()
        if not client_id:
            policy.malformed(doi, f"missing {opts['client_by']}")
            return None
        return SourceRecord(
            text=str(latest["abstract"]).strip(),
            source_id=f"doi:{doi}",
            client_id=client_id,
            date=v1_date,
            label=str(latest.get("category") or "").strip() or None,
            licence=licence,
            extra={
                "doi": doi,
                "version": max(versions),
                "versions_seen": sorted(versions),
                "latest_version_date": str(latest["date"]),
                "title": str(latest.get("title") or ""),
                "authors": str(latest.get("authors") or ""),
                "server": str(latest.get("server") or opts["server"]),
            },
        )


def group_versions(
    records: Iterable[dict[str, Any]], policy: RecordPolicy
) -> dict[str, dict[int, dict[str, Any]]]:
    """DOI -> {version number -> record}; malformed records go through ``policy``."""
    papers: dict[str, dict[int, dict[str, Any]]] = {}
    for index, record in enumerate(records):
        if not isinstance(record, dict):
            policy.malformed(f"record {index}", "not an object")
            continue
        problem = require(record, _FIELDS)
        where = str(record.get("doi") or f"record {index}")
        if problem:
            policy.malformed(where, problem)
            continue
        date = str(record["date"]).strip()[:10]  # hub copies may hold timestamps
        try:
            version = int(str(record["version"]).strip())
            dt.date.fromisoformat(date)
        except ValueError:
            policy.malformed(where, "bad version or date")
            continue
        record = {**record, "date": date}
        papers.setdefault(str(record["doi"]).strip(), {})[version] = record
    return papers


def _message(page: Any, url: str) -> dict[str, Any]:
    messages = page.get("messages") if isinstance(page, dict) else None
    if not messages or not isinstance(messages[0], dict):
        raise MalformedResponseError(f"bioRxiv page {url} has no 'messages' block")
    return messages[0]


def _as_int(value: Any, name: str, url: str) -> int:
    try:
        return int(str(value).strip())
    except ValueError as exc:
        raise MalformedResponseError(
            f"bioRxiv page {url}: {name}={value!r} is not a number"
        ) from exc
