"""The shared HTTP client against a local server: retries, 429, cache, errors, downloads."""

import time

import pytest
from http_fixture import FixtureServer, Reply, closed_port_url

from datasets_builders.http import (
    HttpClient,
    HTTPStatusError,
    MalformedResponseError,
    RateLimitError,
    UnreachableError,
    cache_key,
    redact,
)


@pytest.fixture
def server():
    with FixtureServer() as srv:
        yield srv


def fast_client(tmp_path, **kw):
    return HttpClient(cache_dir=tmp_path, backoff=0.01, **kw)


def test_json_is_cached_and_second_get_makes_no_request(server, tmp_path):
    server.add("/a", Reply({"x": 1}))
    client = fast_client(tmp_path)
    assert client.get_json(f"{server.url}/a", {"q": "1"}) == {"x": 1}
    again = fast_client(tmp_path)  # a new process: only the disk cache is shared
    assert again.get_json(f"{server.url}/a", {"q": "1"}) == {"x": 1}
    assert len(server.hits) == 1 and again.requests_made == 0


def test_secrets_are_sent_but_never_in_cache_keys_or_messages(server, tmp_path):
    server.add("/k", Reply("denied", status=403))
    client = fast_client(tmp_path)
    with pytest.raises(HTTPStatusError) as err:
        client.get_bytes(f"{server.url}/k", {"api_key": "SECRET123"})
    assert server.hits[0].query["api_key"] == "SECRET123"
    assert "SECRET123" not in str(err.value) and "API key" in str(err.value)
    assert "SECRET123" not in cache_key(f"{server.url}/k?api_key=SECRET123&a=1")
    assert redact("http://h/x?api_key=abc&b=2") == "http://h/x?api_key=%2A%2A%2A&b=2"


def test_429_retry_after_is_honoured(server, tmp_path):
    server.add("/r", Reply("slow down", status=429, headers={"Retry-After": "1"}), Reply({"ok": 1}))
    client = fast_client(tmp_path)
    start = time.monotonic()
    assert client.get_json(f"{server.url}/r") == {"ok": 1}
    assert time.monotonic() - start >= 0.95
    assert len(server.hits) == 2


def test_persistent_429_gives_a_clear_rate_limit_error(server, tmp_path):
    server.add("/r", Reply("no", status=429, headers={"Retry-After": "0"}))
    client = fast_client(tmp_path, retries=2)
    with pytest.raises(RateLimitError, match="rate limited"):
        client.get_json(f"{server.url}/r")
    assert len(server.hits) == 3


def test_5xx_is_retried_with_backoff(server, tmp_path):
    server.add("/e", Reply("oops", status=503), Reply("oops", status=502), Reply({"v": 2}))
    slept = []
    client = fast_client(tmp_path, sleep=slept.append)
    assert client.get_json(f"{server.url}/e") == {"v": 2}
    assert slept == [0.01, 0.02]


def test_malformed_body_raises_and_is_not_cached(server, tmp_path):
    server.add("/m", Reply("<html>maintenance</html>"), Reply({"fine": True}))
    client = fast_client(tmp_path)
    with pytest.raises(MalformedResponseError, match="not JSON"):
        client.get_json(f"{server.url}/m")
    assert client.get_json(f"{server.url}/m") == {"fine": True}
    with pytest.raises(MalformedResponseError, match="not well-formed XML"):
        server.add("/x", Reply("<a><b></a>"))
        client.get_xml(f"{server.url}/x")


def test_unreachable_host_fails_fast_with_the_host_named(tmp_path):
    client = HttpClient(cache_dir=tmp_path, backoff=0.05)
    url = closed_port_url()
    start = time.monotonic()
    with pytest.raises(UnreachableError, match="cannot reach 127.0.0.1"):
        client.get_json(f"{url}/x")
    assert time.monotonic() - start < 2


def test_min_interval_spaces_requests(server, tmp_path):
    server.add("/p", Reply({}))
    client = HttpClient(cache_dir=None, min_interval=0.2)
    start = time.monotonic()
    for i in range(3):
        client.get_json(f"{server.url}/p", {"i": i})
    assert time.monotonic() - start >= 0.38


def test_download_resumes_a_partial_file_with_range(server, tmp_path):
    payload = bytes(range(256)) * 40

    def ranged(query, headers):
        if "range" in headers:
            start = int(headers["range"].split("=")[1].rstrip("-"))
            return Reply(payload[start:], status=206)
        return Reply(payload)

    server.handle("/big", ranged)
    dest = tmp_path / "big.bin"
    (tmp_path / "big.bin.part").write_bytes(payload[:1000])
    client = fast_client(tmp_path)
    assert client.download(f"{server.url}/big", dest).read_bytes() == payload
    assert server.hits[0].headers["range"] == "bytes=1000-"
    assert not (tmp_path / "big.bin.part").exists()
    client.download(f"{server.url}/big", dest)  # complete: no new request
    assert len(server.hits) == 1
