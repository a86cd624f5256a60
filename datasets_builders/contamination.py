"""Data hygiene between a split's *public* corpus and its *private* data, checked when a
split is built: :func:`stackoverflow_overlap` (paper 002: C4 ``realnewslike`` public, TFF
StackOverflow private; see its docstring for what is and is not checked).

Whether a *model* may have seen the private data (knowledge cut-offs against the split's
date window) is the harness's question, answered in :mod:`benchmark.model_cutoffs`.
"""

from __future__ import annotations

import gzip
import re
import unicodedata
import urllib.parse
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

# --- public/private overlap: C4 vs StackOverflow (paper 002) --------------------------
#
# Paper 002 (§2.4) checked that its public corpus (C4 realnewslike) and its private data
# (TFF StackOverflow) do not overlap "by comparing unique identifiers: C4 URLs vs
# StackOverflow post IDs", and found no match. What the records here carry:
#
# * a C4 record: its page ``url`` (``extra["url"]`` of the c4 source, the ``url`` column of
#   a stored split, else the URL part of its ``source_id``). A Stack Overflow page URL holds
#   the post id and, for questions, a slug of the title: ``/questions/<id>/<slug>``,
#   ``/questions/<qid>/<slug>/<answer id>``, ``/q/<id>``, ``/a/<id>``, ``/posts/<id>/...``.
# * a TFF StackOverflow record (``format=tff_sqlite``): *no post id*. Each row of the TFF
#   sqlite is a ``tf.train.Example`` with only ``tokens``, ``title``, ``tags``, ``type``,
#   ``creation_date`` and ``score`` (``tff.simulation.datasets.stackoverflow``), so our
#   source id is ``tff-so:<sqlite rowid>``, which names no post. ``title`` is the title of
#   the question, present on answers too (their question's title), pre-processed like the
#   tokens (lower-cased, non-ASCII removed, punctuation split off).
# * a Stack Exchange dump record (``format=stackexchange_xml``): the post id
#   (``se-post:<Id>``; ``parent_id`` = the question of an answer, ``post_id`` = the post a
#   comment is on). With these the paper's id check is run exactly.
#
# :func:`stackoverflow_overlap` therefore reports four things; see its docstring.

STACKEXCHANGE_SITES: tuple[str, ...] = ("stackoverflow.com", "stackexchange.com")
# Hosts whose post ids are Stack Overflow's (meta. and the ru./pt./es./ja. sites number
# their posts separately, so an id from them says nothing about the private posts).
STACKOVERFLOW_POST_HOSTS = frozenset({"stackoverflow.com", "www.stackoverflow.com"})
# A title shorter than this many words is not looked for inside public texts (short titles
# such as "python list sorting" occur in ordinary prose; Stack Overflow titles average ~9).
MIN_TITLE_WORDS = 6
# Slug keys (title words joined, no separators) shorter than this are never matched.
MIN_KEY_CHARS = 10
# Stack Overflow cuts a question's slug at about 80 characters of its title; a URL slug
# at least this long may be such a cut, so it also matches a longer title it begins.
TRUNCATED_SLUG_CHARS = 60
_PREFIX_CHARS = 40
_APOSTROPHES = re.compile(r"['\u2018\u2019`]")
_WORD = re.compile(r"[a-z0-9]+")
_SE_POST = re.compile(r"se-post:(\d+)")


def title_words(text: str) -> tuple[str, ...]:
    """Lower-case ASCII alphanumeric words: the common ground of a TFF title (tokens split
    by punctuation), a Stack Overflow URL slug (punctuation dropped or turned into ``-``)
    and raw web text. Apostrophes are dropped ("you're" -> "youre", as in slugs), accents
    folded (é -> e), every other non-alphanumeric character separates words."""
    text = unicodedata.normalize("NFKD", _APOSTROPHES.sub("", text.lower()))
    return tuple(_WORD.findall(text.encode("ascii", "ignore").decode("ascii")))


def _slug_key(text: str) -> str:
    return "".join(title_words(text))


def _host(url: str) -> str:
    try:
        return (urllib.parse.urlsplit(url).hostname or "").lower()
    except ValueError:
        return ""


def on_stackexchange(url: str, sites: Iterable[str] = STACKEXCHANGE_SITES) -> bool:
    """Whether the URL's host is one of ``sites`` or a subdomain of one."""
    host = _host(url)
    return any(host == site or host.endswith("." + site) for site in sites)


@dataclass(frozen=True)
class PostRef:
    """The Stack Overflow post(s) a page URL names."""

    post_ids: frozenset[int]  # question id and/or answer id (one id space for both)
    slug: str | None  # the question-title slug, when the URL has one


def stackoverflow_post(url: str) -> PostRef | None:
    """The post ids (and title slug) of a stackoverflow.com post URL; None for any other
    page (tags, users, other sites)."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return None
    if (parts.hostname or "").lower() not in STACKOVERFLOW_POST_HOSTS:
        return None
    segs = [urllib.parse.unquote(s) for s in parts.path.split("/") if s]
    ids: set[int] = set()
    slug = None
    if len(segs) >= 2 and segs[0] in ("questions", "q", "a", "posts") and segs[1].isdigit():
        ids.add(int(segs[1]))
        if segs[0] == "questions" and len(segs) >= 3 and not segs[2].isdigit():
            slug = segs[2]
            if len(segs) >= 4 and segs[3].isdigit():  # /questions/<q>/<slug>/<answer>
                ids.add(int(segs[3]))
        if parts.fragment.isdigit():  # /questions/<q>/<slug>#<answer>
            ids.add(int(parts.fragment))
    if not ids:
        return None
    return PostRef(frozenset(ids), slug)


class TitleIndex:
    """Private question titles, looked up two ways: as a Stack Overflow URL slug
    (:meth:`match_slug`) and as a run of words inside a public text (:meth:`find_in`)."""

    def __init__(self, titles: Iterable[str], min_words: int = MIN_TITLE_WORDS) -> None:
        if min_words < 1:
            raise ValueError(f"min_words must be >= 1, got {min_words}")
        self.min_words = min_words
        self._keys: dict[str, str] = {}
        self._prefixes: dict[str, list[str]] = defaultdict(list)
        self._heads: dict[tuple[str, ...], list[tuple[str, ...]]] = defaultdict(list)
        self._texts: dict[tuple[str, ...], str] = {}
        for title in titles:
            words = title_words(title)
            key = "".join(words)
            if len(key) >= MIN_KEY_CHARS and key not in self._keys:
                self._keys[key] = title
                if len(key) >= _PREFIX_CHARS:
                    self._prefixes[key[:_PREFIX_CHARS]].append(key)
            if len(words) >= min_words and words not in self._texts:
                self._texts[words] = title
                self._heads[words[:min_words]].append(words)

    def __len__(self) -> int:
        """Distinct titles usable by either look-up."""
        return len(self._keys.keys() | {"".join(w) for w in self._texts})

    def match_slug(self, slug: str) -> str | None:
        """The private title whose slug ``slug`` is (or, for a cut slug, begins)."""
        key = _slug_key(slug)
        if len(key) < MIN_KEY_CHARS:
            return None
        if key in self._keys:
            return self._keys[key]
        if len(slug) >= TRUNCATED_SLUG_CHARS:
            for candidate in self._prefixes.get(key[:_PREFIX_CHARS], ()):
                if candidate.startswith(key):
                    return self._keys[candidate]
        return None

    def find_in(self, text: str) -> str | None:
        """A private title (of at least ``min_words`` words) that occurs in ``text`` as a
        contiguous run of words, or None."""
        words, k = title_words(text), self.min_words
        for start in range(len(words) - k + 1):
            for title in self._heads.get(words[start : start + k], ()):
                if words[start : start + len(title)] == title:
                    return self._texts[title]
        return None


def _fields(record: Any) -> tuple[str, str, Mapping[str, Any]]:
    """(text, source id, extra fields) of a SourceRecord or of a stored split's row."""
    if isinstance(record, Mapping):
        return str(record.get("text") or ""), str(record.get("source_id") or ""), record
    return str(record.text or ""), str(record.source_id), record.extra


def _url_of(source_id: str, extra: Mapping[str, Any]) -> str:
    url = extra.get("url")
    if isinstance(url, str) and url:
        return url
    if source_id.startswith(("http://", "https://")):
        return source_id.split("#L", 1)[0]  # c4 source ids are "<url>#L<line>"
    return ""


def _private_post_ids(source_id: str, extra: Mapping[str, Any]) -> set[int]:
    ids = set()
    match = _SE_POST.fullmatch(source_id.split("#", 1)[0])
    if match:
        ids.add(int(match[1]))
    for name in ("post_id", "parent_id"):
        value = extra.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            ids.add(value)
        elif isinstance(value, str) and value.isdigit():
            ids.add(int(value))
    return ids


def private_titles(records: Iterable[Any]) -> set[str]:
    """Distinct non-empty ``title`` values of StackOverflow records or split rows."""
    out = set()
    for record in records:
        title = _fields(record)[2].get("title")
        if isinstance(title, str) and title.strip():
            out.add(" ".join(title.split()))
    return out


def write_titles(records: Iterable[Any], path: str | Path) -> int:
    """Write the records' distinct titles, one a line (gzip for ``.gz``), for the c4
    source's ``exclude_titles`` option; returns how many."""
    titles = sorted(private_titles(records))
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wt", encoding="utf-8") as handle:
        handle.writelines(t + "\n" for t in titles)
    return len(titles)


def read_titles(path: str | Path) -> Iterator[str]:
    """Titles written by :func:`write_titles` (blank lines skipped)."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield line.strip()


@dataclass
class OverlapReport:
    """What :func:`stackoverflow_overlap` found; ``flagged`` are public source ids."""

    min_title_words: int = MIN_TITLE_WORDS
    public_records: int = 0
    private_records: int = 0
    private_post_ids: int = 0
    private_titles: int = 0
    site_candidates: list[str] = field(default_factory=list)
    id_matches: list[tuple[str, int]] = field(default_factory=list)
    slug_matches: list[tuple[str, str]] = field(default_factory=list)
    text_matches: list[tuple[str, str]] = field(default_factory=list)

    @property
    def matched(self) -> set[str]:
        """Public records matched to a private post (by id, title slug or title text)."""
        found = self.id_matches + self.slug_matches + self.text_matches
        return {source_id for source_id, _ in found}

    @property
    def flagged(self) -> set[str]:
        """Matched records plus every Stack Exchange page (the candidates)."""
        return self.matched | set(self.site_candidates)

    @property
    def status(self) -> Literal["clean", "candidates", "overlap"]:
        if self.matched:
            return "overlap"
        return "candidates" if self.site_candidates else "clean"

    def checks(self) -> dict[str, str]:
        """Each check, and whether it could run on these records."""
        sites = ", ".join(STACKEXCHANGE_SITES)
        out = {"site": f"checked: public pages on {sites} (and subdomains) are candidates"}
        if self.private_post_ids:
            out["post_id"] = (
                f"checked: post ids in public Stack Overflow URLs vs {self.private_post_ids} "
                "private post ids (paper 002's check)"
            )
        else:
            out["post_id"] = (
                "not checked: the private records carry no Stack Overflow post ids (TFF "
                "StackOverflow stores none); the url_slug check stands in for it"
            )
        if self.private_titles:
            out["url_slug"] = (
                f"checked: question-title slugs of public Stack Overflow URLs vs "
                f"{self.private_titles} private titles"
            )
            out["title_in_text"] = (
                f"checked: private titles of >= {self.min_title_words} words inside public "
                "texts (word-level, case- and punctuation-insensitive)"
            )
        else:
            reason = "not checked: the private records carry no titles"
            out["url_slug"] = out["title_in_text"] = reason
        out["body_text"] = "not checked: private sentences are not searched for in public texts"
        return out

    def as_dict(self, examples: int = 10) -> dict[str, Any]:
        return {
            "status": self.status,
            "public_records": self.public_records,
            "private_records": self.private_records,
            "private_post_ids": self.private_post_ids,
            "private_titles": self.private_titles,
            "counts": {
                "site_candidates": len(self.site_candidates),
                "id_matches": len(self.id_matches),
                "slug_matches": len(self.slug_matches),
                "text_matches": len(self.text_matches),
                "flagged": len(self.flagged),
            },
            "examples": {
                "site_candidates": self.site_candidates[:examples],
                "id_matches": [list(m) for m in self.id_matches[:examples]],
                "slug_matches": [list(m) for m in self.slug_matches[:examples]],
                "text_matches": [list(m) for m in self.text_matches[:examples]],
            },
            "checks": self.checks(),
        }


def stackoverflow_overlap(
    public: Iterable[Any], private: Iterable[Any], *, min_title_words: int = MIN_TITLE_WORDS
) -> OverlapReport:
    """Overlap of a public web corpus (C4) with private StackOverflow data (paper 002).

    ``public``: c4 :class:`~datasets_builders.source.SourceRecord` s or rows of a stored
    split's public part (``text``, ``source_id``, ``url``); ``private``: stackoverflow
    records or rows (``source_id``, ``title``, optional ``post_id`` / ``parent_id``).

    Checked, per public record:

    1. ``site_candidates``: its URL host is stackoverflow.com or *.stackexchange.com (any
       page, matched or not): the pages that could hold private posts;
    2. ``id_matches``: its stackoverflow.com URL names a post id of a private record:
       paper 002's check. Runs only when the private records carry post ids (the Stack
       Exchange dump); TFF StackOverflow carries none;
    3. ``slug_matches``: its stackoverflow.com question URL's title slug equals a private
       question title (compared as :func:`title_words` joined; a slug of at least
       ``TRUNCATED_SLUG_CHARS`` characters may be a cut title and matches one it begins):
       the stand-in for 2 on TFF data, since a question's URL is ``/questions/<id>/<slug of
       its title>`` and every private sentence, answers included, carries its question's
       title;
    4. ``text_matches``: a private title of at least ``min_title_words`` words occurs in its
       text (copies of a question on other sites, quotes).

    Not checked: private *sentences* (the ``tokens``) are not searched for in public texts
    (TFF's sentences are lower-cased, punctuation-split and URL-masked, and short ones such
    as "thanks ." are everywhere); a post id never appears in TFF, so 3 and 4 can miss a
    post whose title was edited after the crawl, or, conversely, match an unrelated
    question with an identical title (2 would not). ``status`` is ``overlap`` on any match
    of 2-4, ``candidates`` when only 1 fired, ``clean`` otherwise (paper 002's "no
    matches" corresponds to an empty 2, or 3 on TFF data).
    """
    report = OverlapReport(min_title_words=min_title_words)
    post_ids: set[int] = set()
    titles: set[str] = set()
    for record in private:
        report.private_records += 1
        _, source_id, extra = _fields(record)
        post_ids |= _private_post_ids(source_id, extra)
        title = extra.get("title")
        if isinstance(title, str) and title.strip():
            titles.add(title)
    index = TitleIndex(titles, min_title_words)
    report.private_post_ids, report.private_titles = len(post_ids), len(index)
    for record in public:
        report.public_records += 1
        text, source_id, extra = _fields(record)
        url = _url_of(source_id, extra)
        if url and on_stackexchange(url):
            report.site_candidates.append(source_id)
        post = stackoverflow_post(url) if url else None
        if post is not None:
            hits = post.post_ids & post_ids
            if hits:
                report.id_matches.append((source_id, min(hits)))
            title = index.match_slug(post.slug) if post.slug else None
            if title is not None:
                report.slug_matches.append((source_id, title))
        title = index.find_in(text)
        if title is not None:
            report.text_matches.append((source_id, title))
    return report
