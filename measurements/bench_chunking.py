"""Chunking throughput and the full KJV split build time (acceptance: build < 30 s).

Measured:

- ``tokenizer_load``: building the GPT-2 BPE from whisper's asset;
- ``chunk``: :func:`datasets_builders.pipeline.chunk_texts` over all 1,189 KJV chapter
  records into 64-token spans (best of ``--repeats``), as records/s, tokens/s and spans/s;
- ``build_cold``: ``build_split`` of the default KJV recipe with an empty records cache
  (read the package file, clean, partition, chunk, cap, hash, save, mark complete);
- ``build_warm``: the same build again, reading the records cache (a resumed build).

Run: ``.venv/bin/python measurements/bench_chunking.py [--repeats 3] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

from datasets_builders.pipeline import build_split, chunk_texts, load_tokenizer, options_for
from datasets_builders.sources.kjv import KJVSource


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--span-length", type=int, default=64)
    parser.add_argument("--json", type=Path, help="Also write the numbers to this file.")
    args = parser.parse_args()
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

    started = time.perf_counter()
    tokenizer = load_tokenizer("gpt2")
    load_s = time.perf_counter() - started
    texts = [record.text for record in KJVSource().fetch({}, Path())]
    tokens = sum(len(ids) for ids in tokenizer.encode_batch(texts))

    best = float("inf")
    for _ in range(args.repeats):
        started = time.perf_counter()
        spans = chunk_texts(texts, tokenizer, args.span_length, 16)
        best = min(best, time.perf_counter() - started)
    n_spans = sum(len(s) for s in spans)

    source = KJVSource()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        timings = {}
        for name, out in (("build_cold", "a"), ("build_warm", "b")):
            started = time.perf_counter()
            manifest = build_split(source, options_for(source), root / out, cache_dir=root / "c")
            timings[name] = time.perf_counter() - started

    report = {
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cpus",
        "records": len(texts),
        "tokens": tokens,
        "spans": n_spans,
        "tokenizer_load_s": round(load_s, 3),
        "chunk_s": round(best, 3),
        "chunk_records_per_s": round(len(texts) / best, 1),
        "chunk_tokens_per_s": round(tokens / best),
        "chunk_spans_per_s": round(n_spans / best, 1),
        **{k: round(v, 3) for k, v in timings.items()},
        "version": manifest["version"],
    }
    for key, value in report.items():
        print(f"{key:>22}: {value}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
