"""A small threaded HTTP server on 127.0.0.1 that serves recorded-format API responses.

Tests register routes (exact paths, optionally with required query parameters) that answer
with fixed replies, sequences of replies (e.g. a 429 with ``Retry-After`` then a 200), or a
handler function (for paging). Every request is recorded in ``server.hits`` so tests can
assert how many requests a build made (zero on a resumed build).
"""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """One HTTP response: status, body (bytes, str, or JSON-able), headers."""

    body: Any = b""
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str | None = None

    def encoded(self) -> tuple[bytes, str]:
        if isinstance(self.body, bytes):
            return self.body, self.content_type or "application/octet-stream"
        if isinstance(self.body, str):
            return self.body.encode("utf-8"), self.content_type or "text/plain; charset=utf-8"
        return json.dumps(self.body).encode("utf-8"), self.content_type or "application/json"


Handler = Callable[[dict[str, str], dict[str, str]], Reply]


@dataclass
class Hit:
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    at: float = field(default_factory=time.monotonic)


class FixtureServer:
    """Serve registered routes on an ephemeral 127.0.0.1 port; use as a context manager."""

    def __init__(self) -> None:
        self._routes: list[tuple[str, dict[str, str], list[Reply] | Handler]] = []
        self.hits: list[Hit] = []
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def add(self, path: str, *replies: Reply, query: dict[str, str] | None = None) -> None:
        """Answer ``path`` with ``replies`` in order; the last one repeats."""
        self._routes.append((path, query or {}, list(replies)))

    def handle(self, path: str, handler: Handler, query: dict[str, str] | None = None) -> None:
        """Answer ``path`` with ``handler(query, headers)``."""
        self._routes.append((path, query or {}, handler))

    def hits_for(self, path: str) -> list[Hit]:
        return [h for h in self.hits if h.path == path]

    def __enter__(self) -> FixtureServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def _reply(self, path: str, query: dict[str, str], headers: dict[str, str]) -> Reply:
        with self._lock:
            self.hits.append(Hit(path, query, headers))
            for route_path, required, target in self._routes:
                if route_path != path or any(query.get(k) != v for k, v in required.items()):
                    continue
                if callable(target):
                    break
                return target.pop(0) if len(target) > 1 else target[0]
            else:
                return Reply(f"no fixture for {path}", status=404)
        return target(query, headers)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class _Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server API)
                parts = urllib.parse.urlsplit(self.path)
                query = dict(urllib.parse.parse_qsl(parts.query, keep_blank_values=True))
                headers = {k.lower(): v for k, v in self.headers.items()}
                reply = server._reply(urllib.parse.unquote(parts.path), query, headers)
                body, ctype = reply.encoded()
                self.send_response(reply.status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                for key, value in reply.headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        return _Handler


def closed_port_url() -> str:
    """A 127.0.0.1 URL whose port nothing listens on (connections are refused at once)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"
