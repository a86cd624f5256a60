"""c4 web subsets by site (paper 004's JOBS / FORUMS / MICROBLOG) and a public population.

Streams ``allenai/c4`` (config ``en``, split ``train``; shards of JSON lines with ``text``,
``timestamp``, ``url``) at a pinned ``revision``, shuffled with ``seed`` and a
``buffer_size`` buffer exactly as the PrE-Text author's published recipe does with
``datasets`` (``shuffle(seed=100, buffer_size=1_000_000)``; PrE-Text issue #3), keeps the
documents whose URL host is one of the subset's sites, splits them on newlines and yields
the first ``max_samples`` non-empty lines (paper 004 App. C: the first 11,000 samples; the
pipeline then draws 1,000 evaluation samples and 1,250 clients x 8 training samples, see
``split_defaults``). Local shards in the same schema can replace the hub (``files``).

Sites (our reading of paper 004, whose appendix names only "a jobs site", "an online forum
site" and "an online microblogging site"; PrE-Text's early data files were named linkedin,
reddit and twitter): ``jobs`` = linkedin.com, ``forums`` = reddit.com, ``microblog`` =
twitter.com; ``sites`` overrides them. A host matches a site when it equals it or is a
subdomain of it.

Public population: in the same pass, ``public_samples`` lines with more than 20 words
(``public_min_words``, PrE-Text's initialization filter) from documents of *none* of the
private sites are pinned to the split's ``public`` part, so the initial population is
disjoint from every private subset by site (paper 004 App. C). ``subset=public`` yields
only public lines (``max_samples`` of them).

Hygiene against another private corpus (paper 002: C4 ``realnewslike`` as public data for
the TFF StackOverflow split): ``exclude_sites`` keeps those hosts out of the public lines
(paper 002: ``stackoverflow.com,stackexchange.com``), and ``exclude_titles`` (a file of
private question titles, :func:`datasets_builders.contamination.write_titles`) drops
public lines that contain a private title and Stack Overflow pages whose URL slug is one.
Both are counted in the source stats. The overlap itself is reported, without dropping
anything, by :func:`datasets_builders.contamination.stackoverflow_overlap`, which says
what it checks and what it cannot (TFF StackOverflow has no post ids).

c4 is ODC-BY and subject to Common Crawl's terms; the text belongs to the sites: fetch it
at run time, do not redistribute.
"""

from __future__ import annotations

import hashlib
import urllib.parse
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from datasets_builders.contamination import TitleIndex, read_titles, stackoverflow_post
from datasets_builders.hub import HubDataset, expand_files, files_revision, iter_rows
from datasets_builders.source import Source, SourceRecord
from datasets_builders.sources._common import Option, parse_options

SITES = {"jobs": ["linkedin.com"], "forums": ["reddit.com"], "microblog": ["twitter.com"]}
HUB = HubDataset("allenai/c4", config="en", split="train", streaming=True)
LICENCE = "odc-by-1.0+common-crawl-terms"

OPTIONS = (
    Option("subset", "jobs", "jobs, forums, microblog, or public"),
    Option("sites", None, "override the subset's sites (host names)", "list"),
    Option("max_samples", 11000, "private lines to keep (the first N in stream order)", "int"),
    Option("min_words", 0, "minimum words of a private line", "int"),
    Option("public_samples", 10000, "public lines pinned to the public part (0: none)", "int"),
    Option("public_min_words", 21, "minimum words of a public line (PrE-Text: > 20)", "int"),
    Option("seed", 100, "stream shuffle seed (PrE-Text recipe: 100)", "int"),
    Option("buffer_size", 1_000_000, "stream shuffle buffer (0: no shuffle)", "int"),
    Option("max_documents", None, "stop after scanning this many documents", "int"),
    Option("revision", "main", "allenai/c4 revision: pin a commit SHA for reproducibility"),
    Option("config", HUB.config, "allenai/c4 config (en, realnewslike, ...)"),
    Option("files", None, "local c4 shards (json.gz) instead of the hub", "list"),
    Option("exclude_sites", None, "hosts never used for public lines (paper 002: SO)", "list"),
    Option("exclude_titles", None, "file of private titles: drop public lines with one"),
)


def host_matches(url: str, sites: list[str]) -> bool:
    host = (urllib.parse.urlsplit(url).hostname or "").lower()
    return any(host == site or host.endswith("." + site) for site in sites)


def _private_page(url: str, titles: TitleIndex) -> bool:
    post = stackoverflow_post(url)
    return post is not None and post.slug is not None and titles.match_slug(post.slug) is not None


class C4Source(Source):
    name: ClassVar[str] = "c4"
    description: ClassVar[str] = "c4 lines from one site (JOBS/FORUMS/MICROBLOG) + public lines"
    date_field: ClassVar[str | None] = "crawl_timestamp"
    options: ClassVar[tuple[Option, ...]] = OPTIONS
    split_defaults: ClassVar[dict[str, Any]] = {
        "partition": "iid",
        "partition_params": {"num_clients": 1375, "samples_per_client": 8},
        "validation_clients": 0,
        "test_clients": 125,
        "span_length": None,
        "cap": 8,
        "dedupe": "none",
    }

    def __init__(self) -> None:
        self.stats: Counter[str] = Counter()

    def _hub(self, opts: dict[str, Any]) -> HubDataset:
        return HubDataset(HUB.repo, opts["revision"], opts["config"], HUB.split, streaming=True)

    def revision(self, options: dict[str, Any]) -> str:
        opts = parse_options(options, OPTIONS, self.name)
        if opts["files"]:
            origin = files_revision(expand_files(opts["files"]))
        else:
            origin = self._hub(opts).describe()
        out = f"{origin} seed={opts['seed']} buffer={opts['buffer_size']}"
        if opts["exclude_titles"]:  # the file's content, not its name, defines the split
            digest = hashlib.sha256(Path(opts["exclude_titles"]).read_bytes()).hexdigest()
            out += f" exclude_titles={digest[:16]}"
        return out

    def fetch(self, options: dict[str, Any], cache_dir: Path) -> Iterator[SourceRecord]:
        opts = parse_options(options, OPTIONS, self.name)
        subset = opts["subset"]
        if subset not in {*SITES, "public"}:
            raise ValueError(f"c4: subset must be one of {sorted(SITES)} or public")
        private_sites = opts["sites"] or SITES.get(subset, [])
        excluded = sorted({s for sites in SITES.values() for s in sites} | set(private_sites))
        want_private = opts["max_samples"] if subset != "public" else 0
        want_public = opts["public_samples"] if subset != "public" else opts["max_samples"]
        banned = opts["exclude_sites"] or []
        titles = TitleIndex(read_titles(opts["exclude_titles"])) if opts["exclude_titles"] else None
        self.stats = Counter()
        seen: set[str] = set()
        rows = iter_rows(
            self._hub(opts),
            local_files=opts["files"],
            cache_dir=cache_dir,
            shuffle_seed=opts["seed"],
            shuffle_buffer=opts["buffer_size"],
        )
        for document in rows:
            if self.stats["private"] >= want_private and self.stats["public"] >= want_public:
                break
            if opts["max_documents"] and self.stats["documents"] >= opts["max_documents"]:
                break
            self.stats["documents"] += 1
            url = str(document.get("url") or "")
            if not url or not isinstance(document.get("text"), str):
                self.stats["skipped: document without url or text"] += 1
                continue
            if want_private and host_matches(url, private_sites):
                kind, wanted, min_words = "private", want_private, opts["min_words"]
            elif host_matches(url, banned):
                self.stats["skipped: excluded site"] += 1
                continue
            elif titles is not None and _private_page(url, titles):
                self.stats["skipped: page of a private question (url slug)"] += 1
                continue
            elif not host_matches(url, excluded):
                kind, wanted, min_words = "public", want_public, opts["public_min_words"]
            else:
                continue
            for number, line in enumerate(document["text"].split("\n")):
                line = line.strip()
                if self.stats[kind] >= wanted or not line or len(line.split()) < min_words:
                    continue
                if kind == "public" and titles is not None and titles.find_in(line):
                    self.stats["skipped: line contains a private title"] += 1
                    continue
                source_id = f"{url}#L{number}"
                if source_id in seen:
                    self.stats["skipped: repeated url"] += 1
                    continue
                seen.add(source_id)
                self.stats[kind] += 1
                extra: dict[str, Any] = {"url": url}
                if kind == "public":
                    extra["part"] = "public"
                yield SourceRecord(
                    text=line,
                    source_id=source_id,
                    date=str(document.get("timestamp") or "")[:10] or None,
                    label=subset if kind == "private" else "public",
                    licence=LICENCE,
                    extra=extra,
                )
