"""Congressional and parliamentary speeches (POPri / LargeFedBench "Congress").

Origins (``origin``, comma separated):

* ``us``: the US Congressional Record through the GovInfo API (collection ``CREC``):
  ``{govinfo_url}/published/{start}/{end}?collection=CREC`` lists daily packages,
  ``/packages/{id}/granules`` their granules (kept: ``us_granule_classes``, by default the
  spoken HOUSE and SENATE proceedings; EXTENSIONS are written remarks), and
  ``/packages/{id}/granules/{granule}/htm`` the text. Listings page with ``offsetMark`` /
  ``nextPage``. The api.data.gov key is read from the environment variable
  ``GOVINFO_API_KEY`` (never from options, never cached or logged).
* ``uk``: House of Commons debates from TheyWorkForYou's ParlParse XML
  (``{twfy_url}/pwdata/scrapedxml/debates/debatesYYYY-MM-DD{a,b,..}.xml``; only the latest
  letter of each sitting day is read, earlier letters are superseded versions).
* ``ca``: House of Commons Hansard through openparliament.ca's public API
  (``{openparliament_url}/debates/`` for the sittings in the window, ``/speeches/?document=``
  for their speeches; procedural interventions are flagged by the API and dropped).
* ``hub``: ``hazylavender/CongressionalDataset`` (schema ``url``, ``date_str``, ``title``,
  ``speaker``, ``data``, ``chamber``, ``country``) or local files in that schema (``files``).

Speeches are split and cleaned by the rules of POPri App. F (what LargeFedBench's scrapers
do, restated): a US speech starts at a member's turn ("  Mr. SURNAME [of State]. ") and is
kept only if it opens by addressing the chair ("Mr. Speaker," "Madam President," ...);
turns of presiding officers (Speaker, pro tempore, Presiding Officer, chairs) and short
unanimous-consent requests (< 400 characters) are dropped, as are procedural narration
paragraphs ("The Clerk read ...", "There was no objection."). Cleaning then strips the
salutation, ``{time}`` markers, ``[[Page ...]]`` markers and NOTE banners, frequent
procedural phrases ("I reserve the balance of my time." ...), and every sentence in which
more than 30 % of the non-space characters are not letters (tables, roll calls, citations).
Our choices where the paper is silent: the 30 % is over non-space characters; UK/CA
presiding officers' turns are dropped like the US ones; only the latest TheyWorkForYou
version of a day is read (LargeFedBench read all letters, duplicating speeches).

Clients (``client_by``): ``speaker`` (default; natural client), ``country_speaker``
(``USA:Mr. SMITH``), or ``speech`` (one client per speech, POPri's setting).
Paper recipe (POPri App. F; ``split_defaults``): 2023-04-01..2024-08-31, one client per
speech (``partition=document``; ``partition=natural`` gives speaker clients), 64-token
spans. Keep the source options ``start``/``end`` equal to the pipeline's window.
"""

from __future__ import annotations

import datetime as dt
import html
import os
import re
import urllib.parse
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from datasets_builders.http import FetchError, HttpClient, MalformedResponseError, decode_text
from datasets_builders.hub import HubDataset, expand_files, files_revision, iter_rows
from datasets_builders.source import Source, SourceRecord
from datasets_builders.sources._common import (
    NETWORK_OPTIONS,
    Option,
    RecordPolicy,
    html_to_text,
    make_client,
    parse_options,
    require,
)

HUB = HubDataset("hazylavender/CongressionalDataset")
GOVINFO = "https://api.govinfo.gov"
TWFY = "https://www.theyworkforyou.com"
OPENPARLIAMENT = "https://api.openparliament.ca"
KEY_ENV = "GOVINFO_API_KEY"

LICENCES = {
    "USA": "us-government-public-domain",
    "GBR": "open-parliament-licence-v3.0",
    "CA": "house-of-commons-open-data-terms",
}
ORIGINS = ("us", "uk", "ca", "hub")

OPTIONS = (
    Option("origin", ["us", "uk", "ca"], "comma list of us, uk, ca; or hub", "list"),
    Option("start", "2023-04-01", "first sitting date fetched", "date"),
    Option("end", "2024-08-31", "last sitting date fetched", "date"),
    Option("client_by", "speaker", "client id: speaker, country_speaker or speech"),
    Option("clean", True, "apply the POPri App. F cleaning rules", "bool"),
    Option("us_granule_classes", ["HOUSE", "SENATE"], "CREC granule classes kept", "list"),
    Option("page_size", 100, "page size for GovInfo / openparliament listings", "int"),
    Option("govinfo_url", GOVINFO, "GovInfo API base URL"),
    Option("twfy_url", TWFY, "TheyWorkForYou base URL"),
    Option("openparliament_url", OPENPARLIAMENT, "openparliament.ca API base URL"),
    Option("revision", HUB.revision, "hub revision (commit SHA or tag) of the HF dataset"),
    Option("files", None, "local files in the hub schema instead of the hub", "list"),
    *NETWORK_OPTIONS,
)
_CLIENT_RULES = ("speaker", "country_speaker", "speech")
# client_by -> (one client in words, is it one person)
_CLIENT_UNITS = {
    "speaker": ("one speaker (a member of parliament)", True),
    "country_speaker": ("one speaker of one country's parliament", True),
    "speech": ("one speech (a speaker gives many: not a person)", False),
}

# --- cleaning (POPri App. F) --------------------------------------------------------------

_SALUTATION = re.compile(
    r"^(?:Mr\.?|Madam|Madame)\s+(?:Deputy\s+|Acting\s+)?"
    r"(?:Speaker|President|Chair|Chairman|Chairwoman)\s*,\s*",
    re.IGNORECASE,
)
_PHRASES = (
    "I reserve the balance of my time.",
    "I yield back the balance of my time.",
    "I yield the floor.",
    "I suggest the absence of a quorum.",
    "I declare the motion carried.",
    "The hon. Member.",
)
_MARKERS = re.compile(
    r"\{time\}\s*\d*|\[\[Page [A-Z]*\d+\]\]|=+\s*(?:END\s+)?NOTE\s*=+|\[Pages? [^\]]*\]"
)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def letter_share(sentence: str) -> float:
    """Share of letters among the non-space characters of ``sentence`` (0 when empty)."""
    chars = [c for c in sentence if not c.isspace()]
    return sum(c.isalpha() for c in chars) / len(chars) if chars else 0.0


def clean_speech(text: str) -> str:
    """Apply the App. F rules to one speech; paragraphs are kept, one per line."""
    text = _SALUTATION.sub("", _MARKERS.sub(" ", text).strip(), count=1)
    for phrase in _PHRASES:
        text = text.replace(phrase, " ")
    paragraphs = []
    for paragraph in text.split("\n"):
        sentences = _SENTENCE_END.split(" ".join(paragraph.split()))
        kept = " ".join(s for s in sentences if letter_share(s) >= 0.7)
        if kept:
            paragraphs.append(kept)
    return "\n".join(paragraphs)


_CHAIR_ADDRESS = re.compile(
    r"^(?:Mr\.|Madam)\s+(?:Speaker|President|Chair|Chairman|Chairwoman)\s*,", re.IGNORECASE
)
_PRESIDING = re.compile(
    r"^(?:The\s+)?(?:Mr\.?\s+|Madam\s+)?(?:Acting\s+|Deputy\s+|Assistant\s+Deputy\s+)?"
    r"(?:Speaker|Chair|Chairman|Chairwoman|President|Presiding Officer)\b",
    re.IGNORECASE,
)


def is_presiding_officer(name: str) -> bool:
    """Turns of the chair are procedure, not debate (Speaker, Deputy Speaker, Chair, ...)."""
    return bool(_PRESIDING.match(name.strip())) or "pro tempore" in name.lower()


# --- US Congressional Record text -----------------------------------------------------

_SURNAME = r"(?:Mc|Mac|De|Di|Da|La|Le|Du|Van|Von)?[A-Z][A-Z'\-]+"
_MEMBER = re.compile(
    rf"^(?P<speaker>(?:Mr|Mrs|Ms|Miss|Dr)\.\s{_SURNAME}(?:\s{_SURNAME})*"
    r"(?:\sof\s[A-Z][a-z]+(?:\s[A-Z][a-z]+)*)?)\.\s+(?P<rest>.*)$",
    re.DOTALL,
)
_OFFICER = re.compile(
    r"^The\s(?:Acting\s)?(?:[A-Z]{2,}\s?)+(?:pro\stempore)?\.\s+(?P<rest>.*)$", re.DOTALL
)
_NARRATION = (
    "The Clerk read",
    "The Clerk will",
    "The legislative clerk",
    "The assistant legislative clerk",
    "The bill clerk",
    "The question was taken",
    "The question is",
    "The motion was",
    "The result of the vote",
    "The bill was",
    "The amendment was",
    "The resolution was",
    "The yeas and nays",
    "The Senate proceeded",
    "A motion to reconsider",
    "There was no objection",
    "Without objection",
    "Pursuant to",
    "Accordingly",
)


@dataclass
class Turn:
    speaker: str
    paragraphs: list[str]
    title: str


def crec_paragraphs(pre: str) -> Iterator[tuple[str, str]]:
    """``(kind, text)`` blocks of a CREC granule: ``para``, ``heading`` or ``block``.

    A paragraph starts with a two-space indent and continues on lines at column 0; a
    deeper-indented upper-case line is a centred heading; other deeper-indented lines are
    quoted or tabular material (bill text, tables), which is not speech; bracketed header
    lines and blank lines end a block.
    """
    kind, lines = "", []
    for raw in pre.splitlines():
        stripped = raw.strip()
        if not stripped or stripped.startswith("[") or stripped.startswith("From the Congr"):
            if lines:
                yield kind, " ".join(lines)
            kind, lines = "", []
            continue
        indent = len(raw) - len(raw.lstrip(" "))
        if indent >= 2:
            if lines:
                yield kind, " ".join(lines)
            heading = stripped.upper() == stripped and any(c.isalpha() for c in stripped)
            kind = "para" if indent == 2 else ("heading" if heading else "block")
            lines = [stripped]
        else:
            lines.append(stripped)
            kind = kind or "para"
    if lines:
        yield kind, " ".join(lines)


def crec_turns(pre: str) -> Iterator[Turn]:
    """Member turns of a CREC granule (officers' turns and narration end a turn)."""
    current: Turn | None = None
    title = ""
    for kind, text in crec_paragraphs(_MARKERS.sub(" ", pre)):
        text = " ".join(text.split())
        if kind != "para":
            if current:
                yield current
            current = None
            title = text.title() if kind == "heading" else title
            continue
        member = _MEMBER.match(text)
        if member or _OFFICER.match(text) or text.startswith(_NARRATION):
            if current:
                yield current
            current = Turn(member["speaker"], [member["rest"]], title) if member else None
        elif current is not None:
            current.paragraphs.append(text)
    if current:
        yield current


def keep_us_turn(speech: str) -> str | None:
    """Why a US turn is dropped (App. F rules), or None when it is a speech to keep."""
    if not _CHAIR_ADDRESS.match(speech):
        return "does not address the chair"
    if "I ask unanimous consent" in speech and len(speech) < 400:
        return "short unanimous-consent request"
    return None


_PRE = re.compile(r"<pre[^>]*>(.*?)</pre>", re.DOTALL | re.IGNORECASE)


def granule_text(body: bytes) -> str:
    """The plain text inside a CREC granule's ``<pre>`` block (indentation kept)."""
    match = _PRE.search(decode_text(body))
    if match is None:
        raise MalformedResponseError("CREC granule HTML has no <pre> block")
    return html.unescape(re.sub(r"<[^>]+>", "", match.group(1)))


# --- the source -----------------------------------------------------------------------


@dataclass
class Speech:
    country: str
    speaker: str
    text: str
    date: str
    source_id: str
    title: str = ""
    chamber: str = ""
    url: str = ""


class CongressSource(Source):
    name: ClassVar[str] = "congress"
    description: ClassVar[str] = (
        "US/UK/Canadian parliamentary speeches (LargeFedBench Congress), cleaned per POPri App. F"
    )
    date_field: ClassVar[str | None] = "sitting_date"
    options: ClassVar[tuple[Option, ...]] = OPTIONS
    split_defaults: ClassVar[dict[str, Any]] = {
        "date_start": "2023-04-01",
        "date_end": "2024-08-31",
        "partition": "document",
        "span_length": 64,
    }

    def __init__(self) -> None:
        self.stats: Counter[str] = Counter()
        self._listings_cached = True

    def revision(self, options: dict[str, Any]) -> str:
        opts = parse_options(options, OPTIONS, self.name)
        if opts["origin"] == ["hub"]:
            if opts["files"]:
                return files_revision(expand_files(opts["files"]))
            return HubDataset(HUB.repo, revision=opts["revision"]).describe()
        return f"{'+'.join(opts['origin'])} {opts['start']}..{opts['end']}"

    def client_unit(self, options: dict[str, Any]) -> tuple[str, bool]:
        rule = parse_options(options, OPTIONS, self.name)["client_by"]
        return _CLIENT_UNITS.get(rule, (f"one {rule}", False))

    def fetch(self, options: dict[str, Any], cache_dir: Path) -> Iterator[SourceRecord]:
        opts = parse_options(options, OPTIONS, self.name)
        origins = opts["origin"]
        if not origins or any(o not in ORIGINS for o in origins):
            raise ValueError(f"congress: origin must be a comma list of {ORIGINS}")
        if "hub" in origins and len(origins) > 1:
            raise ValueError("congress: origin 'hub' cannot be combined with us/uk/ca")
        if opts["client_by"] not in _CLIENT_RULES:
            raise ValueError(f"congress: client_by must be one of {_CLIENT_RULES}")
        key = os.environ.get(KEY_ENV, "").strip()
        if "us" in origins and not key:
            raise FetchError(
                f"congress origin 'us' needs a GovInfo (api.data.gov) key in the environment "
                f"variable {KEY_ENV}; get one free at https://api.data.gov/signup/ "
                "or drop 'us' from --option origin"
            )
        self.stats = Counter()
        policy = RecordPolicy(self.name, opts["on_malformed"], self.stats)
        client = make_client(cache_dir, opts)
        # Listings of a window that reaches today can still grow: do not cache them.
        self._listings_cached = dt.date.fromisoformat(opts["end"]) < dt.date.today()
        speeches: Iterator[Speech]
        for origin in origins:
            if origin == "hub":
                speeches = self._hub(opts, cache_dir, policy)
            elif origin == "us":
                speeches = self._us(client, opts, key, policy)
            elif origin == "uk":
                speeches = self._uk(client, opts, policy)
            else:
                speeches = self._ca(client, opts, policy)
            for speech in speeches:
                record = self._record(speech, opts, policy)
                if record is not None:
                    yield record
        policy.summary()

    def _record(
        self, speech: Speech, opts: dict[str, Any], policy: RecordPolicy
    ) -> SourceRecord | None:
        text = clean_speech(speech.text) if opts["clean"] else speech.text.strip()
        if not text:
            policy.skip("empty after cleaning")
            return None
        client = {
            "speaker": speech.speaker,
            "country_speaker": f"{speech.country}:{speech.speaker}",
            "speech": speech.source_id,
        }[opts["client_by"]]
        self.stats[f"speeches {speech.country}"] += 1
        return SourceRecord(
            text=text,
            source_id=speech.source_id,
            client_id=client,
            date=speech.date,
            label=speech.country,
            licence=LICENCES.get(speech.country),
            extra={
                "speaker": speech.speaker,
                "country": speech.country,
                "chamber": speech.chamber,
                "title": speech.title,
                "url": speech.url,
            },
        )

    # -- hub ----------------------------------------------------------------------------

    def _hub(self, opts: dict[str, Any], cache_dir: Path, policy: RecordPolicy) -> Iterator[Speech]:
        hub = HubDataset(HUB.repo, revision=opts["revision"])
        seen: Counter[str] = Counter()
        for index, row in enumerate(iter_rows(hub, local_files=opts["files"], cache_dir=cache_dir)):
            problem = require(row, ("date_str", "speaker", "data", "country"))
            if problem:
                policy.malformed(f"row {index}", problem)
                continue
            url = str(row.get("url") or f"row-{index}")
            seen[url] += 1
            yield Speech(
                country=str(row["country"]),
                speaker=str(row["speaker"]).strip(),
                text=str(row["data"]),
                date=str(row["date_str"])[:10],
                source_id=f"{url}#{seen[url]}",
                title=str(row.get("title") or ""),
                chamber=str(row.get("chamber") or ""),
                url=url,
            )

    # -- US: GovInfo --------------------------------------------------------------------

    def _govinfo_pages(
        self, client: HttpClient, url: str, params: dict[str, Any], items: str, key: str
    ) -> Iterator[dict[str, Any]]:
        """Items of a GovInfo listing, following ``nextPage`` links (the key is re-added)."""
        next_url: str | None = url
        query: dict[str, Any] | None = {**params, "offsetMark": "*"}
        while next_url:
            page = client.get_json(
                next_url, {**(query or {}), "api_key": key}, use_cache=self._listings_cached
            )
            if not isinstance(page, dict) or not isinstance(page.get(items), list):
                raise MalformedResponseError(f"GovInfo listing {next_url} has no {items!r} list")
            yield from page[items]
            next_url, query = page.get("nextPage"), None

    def _us(
        self, client: HttpClient, opts: dict[str, Any], key: str, policy: RecordPolicy
    ) -> Iterator[Speech]:
        base = opts["govinfo_url"].rstrip("/")
        size = {"pageSize": opts["page_size"]}
        packages = self._govinfo_pages(
            client,
            f"{base}/published/{opts['start']}/{opts['end']}",
            {**size, "collection": "CREC"},
            "packages",
            key,
        )
        classes = {c.upper() for c in opts["us_granule_classes"]}
        for package in sorted(packages, key=lambda p: str(p.get("packageId"))):
            package_id = str(package.get("packageId") or "")
            date = str(package.get("dateIssued") or package_id[5:15])[:10]
            if not package_id or not _is_date(date):
                policy.malformed(package_id or "package", "missing packageId or date")
                continue
            granules = self._govinfo_pages(
                client, f"{base}/packages/{package_id}/granules", size, "granules", key
            )
            for granule in granules:
                granule_id = str(granule.get("granuleId") or "")
                if str(granule.get("granuleClass", "")).upper() not in classes or not granule_id:
                    continue
                url = f"{base}/packages/{package_id}/granules/{granule_id}/htm"
                body = client.get_bytes(url, {"api_key": key})
                try:
                    text = granule_text(body)
                except MalformedResponseError as exc:
                    policy.malformed(granule_id, str(exc))
                    continue
                for index, turn in enumerate(crec_turns(text)):
                    speech = "\n".join(turn.paragraphs)
                    reason = keep_us_turn(speech)
                    if reason:
                        policy.skip(reason)
                        continue
                    yield Speech(
                        country="USA",
                        speaker=turn.speaker,
                        text=speech,
                        date=date,
                        source_id=f"{granule_id}#{index}",
                        title=turn.title,
                        chamber=str(granule.get("granuleClass", "")).title(),
                        url=url,
                    )

    # -- UK: TheyWorkForYou --------------------------------------------------------------

    def _uk(
        self, client: HttpClient, opts: dict[str, Any], policy: RecordPolicy
    ) -> Iterator[Speech]:
        index_url = f"{opts['twfy_url'].rstrip('/')}/pwdata/scrapedxml/debates/"
        listing = client.get_text(index_url, use_cache=self._listings_cached)
        latest: dict[str, str] = {}
        for day, letter in re.findall(r"debates(\d{4}-\d{2}-\d{2})([a-z])\.xml", listing):
            if opts["start"] <= day <= opts["end"] and letter > latest.get(day, ""):
                latest[day] = letter
        for day in sorted(latest):
            url = urllib.parse.urljoin(index_url, f"debates{day}{latest[day]}.xml")
            root = client.get_xml(url)
            heading = ""
            for element in root:
                if element.tag in {"major-heading", "minor-heading"}:
                    heading = " ".join("".join(element.itertext()).split())
                    continue
                if element.tag != "speech" or element.get("nospeaker") == "true":
                    continue
                speaker = (element.get("speakername") or "").strip()
                speech_id = element.get("id") or ""
                if not speaker or not speech_id:
                    policy.malformed(url, "speech without speakername or id")
                    continue
                if is_presiding_officer(speaker):
                    policy.skip("presiding officer")
                    continue
                text = "\n".join(" ".join("".join(p.itertext()).split()) for p in element.iter("p"))
                yield Speech(
                    country="GBR",
                    speaker=speaker,
                    text=text,
                    date=day,
                    source_id=speech_id,
                    title=heading,
                    chamber="House of Commons",
                    url=url,
                )

    # -- Canada: openparliament.ca -------------------------------------------------------

    def _op_pages(self, client: HttpClient, url: str, params: dict[str, Any]) -> Iterator[Any]:
        next_url: str | None = url
        query: dict[str, Any] | None = {**params, "format": "json"}
        while next_url:
            page = client.get_json(next_url, query, use_cache=self._listings_cached)
            if not isinstance(page, dict) or not isinstance(page.get("objects"), list):
                raise MalformedResponseError(f"openparliament page {next_url} has no 'objects'")
            yield from page["objects"]
            relative = (page.get("pagination") or {}).get("next_url")
            next_url, query = (urllib.parse.urljoin(url, relative) if relative else None), None

    def _ca(
        self, client: HttpClient, opts: dict[str, Any], policy: RecordPolicy
    ) -> Iterator[Speech]:
        base = opts["openparliament_url"].rstrip("/")
        client.headers.setdefault("API-Version", "v1")
        debates = self._op_pages(
            client,
            f"{base}/debates/",
            {"date__range": f"{opts['start']},{opts['end']}", "limit": opts["page_size"]},
        )
        documents = sorted(
            {str(d.get("url")) for d in debates if isinstance(d, dict) and d.get("url")}
        )
        for document in documents:
            speeches = self._op_pages(
                client, f"{base}/speeches/", {"document": document, "limit": opts["page_size"]}
            )
            for item in speeches:
                speaker = str((item.get("attribution") or {}).get("en") or "").strip()
                html_text = str((item.get("content") or {}).get("en") or "")
                date = str(item.get("time") or "")[:10]
                url = str(item.get("url") or "")
                if not speaker or not html_text or not _is_date(date) or not url:
                    policy.malformed(url or document, "speech without speaker, content or time")
                    continue
                if item.get("procedural"):
                    policy.skip("procedural")
                    continue
                if is_presiding_officer(speaker):
                    policy.skip("presiding officer")
                    continue
                title = next(
                    (str((item.get(h) or {}).get("en")) for h in ("h3", "h2", "h1") if item.get(h)),
                    "",
                )
                yield Speech(
                    country="CA",
                    speaker=speaker,
                    text=html_to_text(html_text),
                    date=date,
                    source_id=url,
                    title=title,
                    chamber="House of Commons",
                    url=urllib.parse.urljoin(base, url),
                )


def _is_date(value: str) -> bool:
    try:
        dt.date.fromisoformat(value)
    except ValueError:
        return False
    return True
