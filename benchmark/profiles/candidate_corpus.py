"""Paper 003's candidate responses: L samples from the generator per public prompt, cached.

DPPrefSyn (Algorithm 1, lines 13–14) samples L responses per public prompt. They depend on
the generator, the prompts and the sampling settings only, never on private data or ε, so
one set serves every ε and seed (seed-003 §7: "cache candidates per (generator, prompt
set)"). The cache is one JSON file per key under ``cache_dir()/candidates/``: strings
only, read with ``json`` (nothing in it can run code) and checked against its key and
shape, else recomputed. As with the teacher corpus, a sandboxed method process may read
it but not write it (a submission must not plant the candidates another run ranks); a
trusted caller warms it beforehand.

Generation follows the released code: the raw prompt (``chat=False``: the prompts are
already in the "\\n\\nHuman: … \\n\\nAssistant: " format), each response cut at the first
stop string (vLLM's ``stop``) and stripped.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmark.files import atomic_write
from benchmark.profiles.base import Generator, SamplingParams
from benchmark.profiles.cache import cache_dir

FORMAT = "candidates/1"
MAX_PROMPTS = 200_000  # a request's prompts (paper 003 uses 52,000)


def candidate_key(
    generator: Generator, prompts: list[str], count: int, params: SamplingParams, stop: list[str]
) -> str:
    payload = {
        "format": FORMAT,
        "generator": generator.name,
        "prompts": hashlib.sha256("\x1e".join(prompts).encode()).hexdigest(),
        "count": count,
        "params": [params.max_new_tokens, params.temperature, params.top_p, params.seed],
        "stop": stop,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:24]


def cut_at_stop(text: str, stop: list[str]) -> str:
    """``text`` up to its first stop string, stripped."""
    end = min((i for i in (text.find(s) for s in stop) if i >= 0), default=len(text))
    return text[:end].strip()


def candidates_dir() -> Path:
    """Where the candidate sets are cached. The harness fills it during a run for a method
    process whose sandbox was drawn at launch, so the coordinator creates it before then."""
    return cache_dir() / "candidates"


def candidates(
    generator: Generator,
    prompts: list[str],
    count: int,
    params: SamplingParams,
    stop: list[str],
) -> list[list[str]]:
    """``count`` responses per prompt: from the cache, else sampled (and cached where this
    process may write)."""
    key = candidate_key(generator, prompts, count, params, stop)
    path = candidates_dir() / f"{key}.json"
    cached = _read(path, key, len(prompts), count)
    if cached is not None:
        return cached
    repeated = [p for p in prompts for _ in range(count)]
    texts = [cut_at_stop(t, stop) for t in generator.generate(repeated, params, chat=False)]
    grouped = [texts[i * count : (i + 1) * count] for i in range(len(prompts))]
    with contextlib.suppress(OSError):  # a sandboxed method process may not write
        _write(path, key, grouped)
    return grouped


def candidate_request(
    prompts: list[str], count: int, params: SamplingParams, stop: list[str]
) -> dict[str, Any]:
    """What a method asks the harness to cache (:meth:`benchmark.method.Method.cache_requests`):
    the same arguments as :func:`candidates`, as data."""
    sampling = [params.max_new_tokens, params.temperature, params.top_p, params.seed]
    return {
        "kind": "candidates",
        "prompts": prompts,
        "count": count,
        "params": sampling,
        "stop": stop,
    }


def build_requested(requests: Any, generator: Callable[[], Generator]) -> None:
    """Build the candidate sets an (untrusted) method asked for, in the trusted process:
    every field is checked to be plain data within bounds before anything is generated,
    and the cache is keyed by it as :func:`candidates` keys it, so the method can only
    choose which public generation is cached, never what its cache file holds. The
    generator (a callable) is loaded only when something is requested (a vLLM engine holds
    the GPU only while it samples: :mod:`benchmark.profiles.vllm_engine`)."""
    if not isinstance(requests, list):
        raise ValueError("cache requests: expected a list")
    parsed = [_parsed(r) for r in requests]
    if not parsed:
        return
    writer = generator()
    for prompts, count, params, stop in parsed:
        candidates(writer, prompts, count, params, stop)


def _parsed(request: Any) -> tuple[list[str], int, SamplingParams, list[str]]:
    fields = {"kind", "prompts", "count", "params", "stop"}
    if not isinstance(request, dict) or set(request) != fields:
        raise ValueError(f"cache request: expected the fields {sorted(fields)}")
    prompts, count, params, stop = (request[k] for k in ("prompts", "count", "params", "stop"))
    if request["kind"] != "candidates":
        raise ValueError(f"cache request: unknown kind {request['kind']!r}")
    if not _strings(prompts, MAX_PROMPTS) or not _strings(stop, 8):
        raise ValueError("cache request: prompts and stop must be lists of strings")
    if not (_whole(count, 1, 64) and isinstance(params, list) and len(params) == 4):
        raise ValueError("cache request: count in 1..64 and params [tokens, T, top_p, seed]")
    tokens, temperature, top_p, seed = params
    if not (_whole(tokens, 1, 4096) and _whole(seed, 0, 2**63 - 1)):
        raise ValueError("cache request: max_new_tokens in 1..4096 and a seed ≥ 0")
    if not all(_real(v) and 0 < v <= 100 for v in (temperature, top_p)):
        raise ValueError("cache request: temperature and top_p must be numbers > 0")
    return prompts, count, SamplingParams(tokens, float(temperature), float(top_p), seed), stop


def _strings(value: Any, most: int) -> bool:
    return isinstance(value, list) and len(value) <= most and all(type(v) is str for v in value)


def _whole(value: Any, low: int, high: int) -> bool:
    return type(value) is int and low <= value <= high


def _real(value: Any) -> bool:
    return type(value) in (int, float) and value == value


def _read(path: Path, key: str, prompts: int, count: int) -> list[list[str]] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("key") != key:
        return None
    rows = data.get("candidates")
    if not isinstance(rows, list) or len(rows) != prompts:
        return None
    for row in rows:
        if not (
            isinstance(row, list) and len(row) == count and all(isinstance(t, str) for t in row)
        ):
            return None
    return rows


def _write(path: Path, key: str, rows: list[list[str]]) -> None:
    atomic_write(path, json.dumps({"key": key, "candidates": rows}))
