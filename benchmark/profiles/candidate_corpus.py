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
import os
from pathlib import Path

from benchmark.profiles.base import Generator, SamplingParams
from benchmark.profiles.cache import cache_dir

FORMAT = "candidates/1"


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
    path = cache_dir() / "candidates" / f"{key}.json"
    cached = _read(path, key, len(prompts), count)
    if cached is not None:
        return cached
    repeated = [p for p in prompts for _ in range(count)]
    texts = [cut_at_stop(t, stop) for t in generator.generate(repeated, params, chat=False)]
    grouped = [texts[i * count : (i + 1) * count] for i in range(len(prompts))]
    with contextlib.suppress(OSError):  # a sandboxed method process may not write
        _write(path, key, grouped)
    return grouped


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
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp-{os.getpid()}")
    tmp.write_text(json.dumps({"key": key, "candidates": rows}))
    os.replace(tmp, path)
