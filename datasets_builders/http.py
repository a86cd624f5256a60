"""The one HTTP client every network source uses: retries, rate limits, and a resumable cache.

Why one client: public APIs fail in the same few ways (hosts down, 5xx, 429 with
``Retry-After``, truncated bodies), and a build that dies halfway must resume instead of
starting over. Every successful response is written atomically to an on-disk cache under
the source's ``cache_dir``, keyed by URL and parameters *without* secrets (API keys never
reach a file name or a cache key), so the second run of a build makes no requests at all.
Base URLs are plain options of each source, so tests point them at ``127.0.0.1``.

Only the standard library is used (``urllib``), so the client works wherever the harness does.
"""

from __future__ import annotations

import email.utils
import hashlib
import http.client
import json
import logging
import os
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmark.files import atomic_write

log = logging.getLogger(__name__)

USER_AGENT = "fedsynth-datasets/0.1 (federated split builder; +https://github.com/fedsynth)"
# Query parameters that carry credentials: sent, but never cached, logged or shown.
SECRET_PARAMS = frozenset({"api_key", "apikey", "key", "token", "access_token"})


class FetchError(RuntimeError):
    """A source could not be fetched; the message says what to do about it."""


class UnreachableError(FetchError):
    """The host could not be reached (DNS, refused connection, timeout)."""


class HTTPStatusError(FetchError):
    """The server answered with an error status that retrying will not fix."""

    def __init__(self, message: str, status: int, url: str) -> None:
        super().__init__(message)
        self.status = status
        self.url = url


class RateLimitError(HTTPStatusError):
    """Still rate limited (429) after every retry."""


class MalformedResponseError(FetchError):
    """A response body is not what the API documents (not JSON/XML, missing fields)."""


class MalformedRecordError(FetchError):
    """One record of an otherwise valid response is unusable (and the policy is to stop)."""


def redact(url: str) -> str:
    """``url`` with secret query parameters replaced by ``***`` (for messages and logs)."""
    parts = urllib.parse.urlsplit(url)
    query = [
        (k, "***" if k.lower() in SECRET_PARAMS else v)
        for k, v in urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    ]
    return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))


def with_params(url: str, params: Mapping[str, Any] | None) -> str:
    """Merge ``params`` into ``url``'s query string (params win); ``None`` values are dropped."""
    if not params:
        return url
    parts = urllib.parse.urlsplit(url)
    query = dict(urllib.parse.parse_qsl(parts.query, keep_blank_values=True))
    query.update({k: str(v) for k, v in params.items() if v is not None})
    return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))


def cache_key(url: str) -> str:
    """Stable key of a request: the URL with secrets removed and parameters sorted."""
    parts = urllib.parse.urlsplit(url)
    query = sorted(
        (k, v)
        for k, v in urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
        if k.lower() not in SECRET_PARAMS
    )
    return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))


@dataclass
class ResponseCache:
    """Response bodies on disk, one file per request key; ``root=None`` disables caching."""

    root: Path | None

    def _path(self, key: str) -> Path | None:
        if self.root is None:
            return None
        digest = hashlib.sha256(key.encode("utf-8")).hexdigest()
        return self.root / digest[:2] / f"{digest}.body"

    def get(self, key: str) -> bytes | None:
        path = self._path(key)
        if path is None or not path.is_file():
            return None
        return path.read_bytes()

    def put(self, key: str, body: bytes) -> None:
        path = self._path(key)
        if path is not None:
            atomic_write(path, body)


def _retry_after_seconds(value: str | None) -> float | None:
    """``Retry-After`` as seconds: either delta-seconds or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


@dataclass
class HttpClient:
    """GET with retries, backoff, ``Retry-After``, a request-rate floor and a response cache.

    ``min_interval`` is the minimum time between two network requests (NCBI allows 3/s
    without a key: 0.34 s). Retry waits are ``backoff * 2**attempt`` capped at
    ``max_backoff``; a 429's ``Retry-After`` is honoured up to ``max_retry_after``.
    Unreachable hosts are retried ``connect_retries`` times only, so a wrong base URL or a
    machine without network fails in seconds with a message naming the host.
    """

    cache_dir: Path | None = None
    timeout: float = 30.0
    retries: int = 5
    connect_retries: int = 1
    backoff: float = 1.0
    max_backoff: float = 60.0
    max_retry_after: float = 600.0
    min_interval: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    sleep: Callable[[float], None] = time.sleep
    requests_made: int = field(default=0, init=False)
    _last_request: float = field(default=0.0, init=False, repr=False)

    def __post_init__(self) -> None:
        self.cache = ResponseCache(Path(self.cache_dir) / "http" if self.cache_dir else None)

    # -- public API -------------------------------------------------------------------

    def get_bytes(
        self,
        url: str,
        params: Mapping[str, Any] | None = None,
        *,
        use_cache: bool = True,
        key: str | None = None,
        validate: Callable[[bytes], Any] | None = None,
    ) -> bytes:
        """Body of a GET; served from the cache when present, cached after ``validate`` passes.

        ``key`` replaces the URL-derived cache key (for URLs holding session tokens, such
        as NCBI's ``WebEnv``). ``validate`` raises on a body that must not be cached.
        """
        full = with_params(url, params)
        key = key or cache_key(full)
        if use_cache:
            cached = self.cache.get(key)
            if cached is not None:
                return cached
        body = self._fetch(full)
        if validate is not None:
            validate(body)
        if use_cache:
            self.cache.put(key, body)
        return body

    def get_json(self, url: str, params: Mapping[str, Any] | None = None, **kw: Any) -> Any:
        """Parsed JSON body; a non-JSON body raises :class:`MalformedResponseError`."""
        full = with_params(url, params)
        body = self.get_bytes(full, validate=lambda b: parse_json(b, full), **kw)
        return parse_json(body, full)

    def get_text(self, url: str, params: Mapping[str, Any] | None = None, **kw: Any) -> str:
        return decode_text(self.get_bytes(url, params, **kw))

    def get_xml(self, url: str, params: Mapping[str, Any] | None = None, **kw: Any) -> ET.Element:
        """Parsed XML root; a body that is not well-formed XML raises, and is not cached."""
        full = with_params(url, params)
        body = self.get_bytes(full, validate=lambda b: parse_xml(b, full), **kw)
        return parse_xml(body, full)

    def download(self, url: str, dest: Path, params: Mapping[str, Any] | None = None) -> Path:
        """Stream a large file to ``dest`` (kept if already complete), resuming a partial one.

        The partial download lives at ``dest.part`` and continues with a ``Range`` request;
        ``dest`` appears only when the whole body has been received.
        """
        dest = Path(dest)
        if dest.is_file():
            return dest
        dest.parent.mkdir(parents=True, exist_ok=True)
        part = dest.with_name(dest.name + ".part")
        full = with_params(url, params)
        for attempt in range(self.retries + 1):
            have = part.stat().st_size if part.exists() else 0
            headers = {"Range": f"bytes={have}-"} if have else {}
            try:
                with self._open(full, headers) as resp:
                    status = getattr(resp, "status", 200)
                    mode = "ab" if have and status == 206 else "wb"
                    with open(part, mode) as fh:
                        while chunk := resp.read(1 << 20):
                            fh.write(chunk)
                os.replace(part, dest)
                return dest
            except _Retry as retry:
                self._wait(retry, attempt, full)
            except _NETWORK_ERRORS as exc:
                if part.exists() and part.stat().st_size > have:
                    continue  # made progress: resume at once
                self._network_failure(full, exc, attempt)
        raise FetchError(f"gave up downloading {redact(full)} after {self.retries} retries")

    # -- internals ----------------------------------------------------------------------

    def _fetch(self, url: str) -> bytes:
        last: _Retry | None = None
        for attempt in range(self.retries + 1):
            try:
                with self._open(url, {}) as resp:
                    return resp.read()
            except _Retry as retry:
                last = retry
                if attempt == self.retries:
                    break
                self._wait(retry, attempt, url)
            except _NETWORK_ERRORS as exc:
                self._network_failure(url, exc, attempt)
        if last is None:
            raise FetchError(f"gave up fetching {redact(url)} after {self.retries} retries")
        if last.status == 429:
            raise RateLimitError(
                f"still rate limited (HTTP 429) by {redact(url)} after {self.retries} retries; "
                "wait and rerun the build (it resumes from its cache) or use an API key",
                429,
                redact(url),
            )
        raise HTTPStatusError(
            f"HTTP {last.status} from {redact(url)} after {self.retries} retries: {last.reason}",
            last.status,
            redact(url),
        )

    def _open(self, url: str, extra_headers: Mapping[str, str]) -> Any:
        """Open ``url`` (respecting ``min_interval``); raise :class:`_Retry` for retryable codes."""
        wait = self._last_request + self.min_interval - time.monotonic()
        if wait > 0:
            self.sleep(wait)
        self._last_request = time.monotonic()
        self.requests_made += 1
        headers = {"User-Agent": USER_AGENT, **self.headers, **extra_headers}
        request = urllib.request.Request(url, headers=headers)
        try:
            return urllib.request.urlopen(request, timeout=self.timeout)
        except urllib.error.HTTPError as exc:
            body = exc.read()[:300].decode("utf-8", "replace")
            if exc.code == 429 or exc.code >= 500:
                retry_after = _retry_after_seconds(exc.headers.get("Retry-After"))
                raise _Retry(exc.code, body or str(exc.reason), retry_after) from exc
            hint = _STATUS_HINTS.get(exc.code, "")
            raise HTTPStatusError(
                f"HTTP {exc.code} from {redact(url)}: {body.strip() or exc.reason}{hint}",
                exc.code,
                redact(url),
            ) from exc

    def _wait(self, retry: _Retry, attempt: int, url: str) -> None:
        delay = self._backoff(attempt)
        if retry.retry_after is not None:
            delay = min(retry.retry_after, self.max_retry_after)
        log.warning("HTTP %s from %s; retrying in %.1f s", retry.status, redact(url), delay)
        self.sleep(delay)

    def _backoff(self, attempt: int) -> float:
        return min(self.backoff * (2**attempt), self.max_backoff)

    def _network_failure(self, url: str, exc: BaseException, attempt: int) -> None:
        """Sleep before the next try, or raise when this failure has used up its retries.

        A host that refuses connections or does not resolve gets ``connect_retries`` tries
        (fail fast); a reset, timeout or truncated body gets the full ``retries``.
        """
        reason = getattr(exc, "reason", exc)
        unreachable = isinstance(reason, ConnectionRefusedError | socket.gaierror)
        if attempt >= (self.connect_retries if unreachable else self.retries):
            host = urllib.parse.urlsplit(url).netloc
            if isinstance(reason, TimeoutError):
                reason = "timed out"
            raise UnreachableError(
                f"cannot reach {host} ({reason}) while fetching {redact(url)}; check the "
                "network, or point the source at a mirror with its base-URL option"
            ) from exc
        self.sleep(self._backoff(attempt))


_STATUS_HINTS = {
    401: " (missing or invalid API key?)",
    403: " (missing or invalid API key, or access denied?)",
    404: " (not found: check the URL, identifier or date window)",
}


class _Retry(Exception):
    """A retryable answer (429 or 5xx), with the server's ``Retry-After`` in seconds."""

    def __init__(self, status: int, reason: str, retry_after: float | None) -> None:
        super().__init__(status, reason)
        self.status = status
        self.reason = reason
        self.retry_after = retry_after


_NETWORK_ERRORS = (urllib.error.URLError, OSError, http.client.HTTPException)


def decode_text(body: bytes) -> str:
    return body.decode("utf-8", errors="replace")


def parse_json(body: bytes, url: str = "") -> Any:
    try:
        return json.loads(body)
    except ValueError as exc:
        snippet = body[:120].decode("utf-8", "replace")
        raise MalformedResponseError(
            f"response from {redact(url)} is not JSON ({exc}); it starts with {snippet!r}"
        ) from exc


def parse_xml(body: bytes, url: str = "") -> ET.Element:
    try:
        return ET.fromstring(body)
    except ET.ParseError as exc:
        snippet = body[:120].decode("utf-8", "replace")
        raise MalformedResponseError(
            f"response from {redact(url)} is not well-formed XML ({exc}); "
            f"it starts with {snippet!r}"
        ) from exc
