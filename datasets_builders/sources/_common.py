"""What the network sources share: typed options, malformed-record policy, HTML to text.

Options arrive from ``fedsynth splits build SOURCE --option key=value`` as strings (or
values the CLI already parsed as JSON); each source declares its options once, with defaults that
reproduce its paper's split, and :func:`parse_options` types and checks them, so a typo in
an option name is an error instead of a silently different split.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from datasets_builders.http import HttpClient, MalformedRecordError

log = logging.getLogger(__name__)

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


@dataclass(frozen=True)
class Option:
    """One option of a source: name, default, type (str/int/float/bool/list/date), help."""

    name: str
    default: Any
    help: str
    kind: str = "str"

    def coerce(self, value: Any, source: str) -> Any:
        if value is None:
            return None
        try:
            return _COERCE[self.kind](value)
        except (TypeError, ValueError) as exc:
            raise ValueError(
                f"{source}: option {self.name}={value!r} is not a valid {self.kind} ({exc})"
            ) from exc


def _to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError("expected true/false")


def _to_list(value: Any) -> list[str]:
    if isinstance(value, list | tuple):
        return [str(v).strip() for v in value if str(v).strip()]
    return [part.strip() for part in str(value).split(",") if part.strip()]


def _to_date(value: Any) -> str:
    if isinstance(value, dt.date):
        return value.isoformat()
    return dt.date.fromisoformat(str(value).strip().replace("/", "-")).isoformat()


_COERCE = {
    "str": lambda v: str(v),
    "int": lambda v: int(v),
    "float": lambda v: float(v),
    "bool": _to_bool,
    "list": _to_list,
    "date": _to_date,
}


def parse_options(
    options: Mapping[str, Any], spec: Sequence[Option], source: str
) -> dict[str, Any]:
    """Typed options with defaults filled in; unknown names raise ``ValueError``."""
    known = {opt.name: opt for opt in spec}
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise ValueError(
            f"{source}: unknown option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
        )
    return {name: opt.coerce(options.get(name, opt.default), source) for name, opt in known.items()}


def make_client(cache_dir: Path, opts: Mapping[str, Any], **kw: Any) -> HttpClient:
    """An :class:`HttpClient` caching under ``cache_dir`` with the source's retry options."""
    return HttpClient(
        cache_dir=Path(cache_dir),
        retries=int(opts.get("retries", 5)),
        backoff=float(opts.get("backoff", 1.0)),
        timeout=float(opts.get("timeout", 30.0)),
        **kw,
    )


# Options every network source accepts (retry behaviour and malformed-record policy).
NETWORK_OPTIONS = (
    Option("retries", 5, "retries per request on 429/5xx/transient errors", "int"),
    Option("backoff", 1.0, "first retry wait in seconds (doubles per retry)", "float"),
    Option("timeout", 30.0, "per-request timeout in seconds", "float"),
    Option(
        "on_malformed",
        "skip",
        "what a malformed record does: 'skip' (counted in source.stats) or 'error'",
    ),
)


class RecordPolicy:
    """Counts skipped and malformed records; raises instead when the policy is 'error'."""

    def __init__(self, source: str, on_malformed: str, stats: Counter[str]) -> None:
        if on_malformed not in {"skip", "error"}:
            raise ValueError(f"{source}: on_malformed must be 'skip' or 'error'")
        self.source = source
        self.on_malformed = on_malformed
        self.stats = stats

    def malformed(self, where: str, reason: str) -> None:
        if self.on_malformed == "error":
            raise MalformedRecordError(
                f"{self.source}: malformed record at {where}: {reason} "
                "(use --option on_malformed=skip to skip such records and count them)"
            )
        self.stats[f"malformed: {reason}"] += 1

    def skip(self, reason: str) -> None:
        self.stats[f"skipped: {reason}"] += 1

    def summary(self) -> None:
        bad = {k: v for k, v in self.stats.items() if k.startswith("malformed")}
        if bad:
            log.warning("%s: skipped malformed records: %s", self.source, bad)


def require(record: Mapping[str, Any], fields: Iterable[str]) -> str | None:
    """Name of the first missing/empty field of ``record``, or None when all are present."""
    for name in fields:
        value = record.get(name)
        if value is None or (isinstance(value, str) and not value.strip()):
            return f"missing {name}"
    return None


class _TextExtractor(HTMLParser):
    _BLOCK = {"p", "br", "div", "li", "pre", "blockquote", "tr", "h1", "h2", "h3", "h4"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self._BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self._BLOCK:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        self.parts.append(data)


def html_to_text(markup: str) -> str:
    """Visible text of an HTML fragment, one line per block element, spaces collapsed."""
    parser = _TextExtractor()
    parser.feed(markup)
    parser.close()
    lines = (
        re.sub(r"[ \t\r\f\v]+", " ", line).strip() for line in "".join(parser.parts).split("\n")
    )
    return "\n".join(line for line in lines if line)
