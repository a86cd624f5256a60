"""Time the evaluator's heavy steps on this machine (issue 4, acceptance item 4).

Embeds ``--n`` KJV verses twice over (two disjoint sets) with the ``cpu`` profile's
all-MiniLM-L6-v2, re-reads one set through the embedding cache, then computes FID and MAUVE
(mauve-text defaults) on the two n x n 384-d sets. With ``--downstream-spans K`` it also
times one epoch of downstream training of the ``cpu`` on-device LM on K ~64-token KJV spans
and one evaluation pass on K/8 spans, the budget of the KJV anchors.

Run: ``.venv/bin/python measurements/bench_metrics.py [--n 10000] [--downstream-spans 3000]``
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from benchmark.evaluation.downstream import evaluate_lm, train_lm  # noqa: E402
from benchmark.evaluation.embedding_cache import EmbeddingCache  # noqa: E402
from benchmark.evaluation.fid import fid_from_features  # noqa: E402
from benchmark.evaluation.mauve_metric import mauve_from_features  # noqa: E402
from benchmark.profiles import get_profile  # noqa: E402
from datasets_builders.sources.kjv import kjv_path  # noqa: E402


def timed(label: str, fn: Callable[[], Any]) -> Any:
    """Run ``fn`` and print its wall time and this process's CPU time (all threads).

    CPU time is printed too because the machine is shared: wall time alone mostly measures
    the other jobs' load.
    """
    wall, cpu = time.perf_counter(), time.process_time()
    value = fn()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(f"{label:<62} wall {wall:8.2f} s   cpu {cpu:8.2f} s", flush=True)
    return value


def kjv_verses() -> list[str]:
    with kjv_path().open(encoding="utf-8") as handle:
        return [json.loads(line)["text"] for line in handle]


def spans(verses: list[str], count: int, chars: int = 320) -> list[str]:
    """Consecutive verses joined into chunks of >= ``chars`` characters (~64+ GPT-2 tokens)."""
    out, chunk = [], ""
    for verse in verses:
        chunk = f"{chunk} {verse}".strip()
        if len(chunk) >= chars:
            out.append(chunk)
            chunk = ""
        if len(out) == count:
            break
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--downstream-spans", type=int, default=0)
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at start")
    verses = kjv_verses()
    if 2 * args.n > len(verses):
        raise SystemExit(f"--n {args.n} needs {2 * args.n} verses; the KJV has {len(verses)}")
    first, second = verses[0 : 2 * args.n : 2], verses[1 : 2 * args.n : 2]

    profile = get_profile("cpu")
    embedder = timed("load all-MiniLM-L6-v2 (cpu profile)", profile.embedder)
    cache = EmbeddingCache(embedder, directory=None)
    timed("warm-up: embed 64 texts", lambda: embedder.embed(verses[-64:]))
    p = timed(f"embed {args.n:,} texts", lambda: cache.embed(first))
    q = timed(f"embed another {args.n:,} texts", lambda: cache.embed(second))
    timed(f"embed the first {args.n:,} again (cache hit)", lambda: cache.embed(first))
    size = f"{args.n:,} x {args.n:,}"
    fid = timed(f"FID {size} ({p.shape[1]}-d)", lambda: fid_from_features(p, q))
    mauve = timed(f"MAUVE {size} (mauve-text defaults)", lambda: mauve_from_features(p, q))
    print(f"values: FID={fid:.5f} MAUVE={mauve['mauve']:.4f} (two halves of the KJV)")

    if args.downstream_spans:
        lm = profile.ondevice_lm()
        texts = spans(verses, args.downstream_spans + args.downstream_spans // 8)
        train, held_out = texts[: args.downstream_spans], texts[args.downstream_spans :]
        model = lm.new_model(0)
        timed(
            f"downstream: 1 epoch on {len(train):,} spans ({lm.name}, bs 32, len 64)",
            lambda: train_lm(model, lm.tokenizer, train, 1, 2e-4, 32, seed=0),
        )
        scores = timed(
            f"downstream: evaluate {len(held_out):,} spans",
            lambda: evaluate_lm(model, lm.tokenizer, held_out),
        )
        print(f"values: held-out top1={scores['top1']:.4f} ce={scores['ce']:.3f}")


if __name__ == "__main__":
    main()
