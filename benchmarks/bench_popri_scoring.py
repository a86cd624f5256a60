"""Time one POPri scoring round through the real pool path, beside this machine's matmul rate.

A round = every client scores every synthetic sample (methods.popri_scoring.SimilarityScorer,
one float32 matrix product over the memo'd client means), then ClientPool.aggregate clips each
client's row to norm 1, sums, adds Gaussian noise and records the release. Default sizes are
issue 5's: 10,000 clients x 6 samples, 18,000 synthetic embeddings of dim 384 (paper 000:
K=1800 prompts x J=10).

Client embeddings come from a lookup table of random unit vectors (text ``"<row>"`` -> row),
so the numbers measure scoring and aggregation, not a sentence encoder. Reported:

- ``cold``: the first round, which also computes and memoises every client's mean embedding;
- ``warm``: later rounds (best of ``--repeats``), split into the client function (the product)
  and the pool's generic part (validation incl. a finiteness check, clipping, sum, noise);
- ``matmul``: a plain float32 product of the same shapes (numpy and torch), as GFLOP/s;
- ``clip_sum_f32``: the clip+sum done as one float32 pass (row norms by einsum, then the
  scale vector times the matrix), i.e. what the pool's generic part could cost.

Run: ``.venv/bin/python benchmarks/bench_popri_scoring.py [--json out.json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections.abc import Callable

import numpy as np

from benchmark.federation.clients import ClientBatch
from benchmark.federation.pool import ClientPool
from benchmark.privacy.ledger import PrivacyLedger
from benchmark.profiles.base import Embedder
from methods.popri_scoring import SimilarityScorer, unit_rows


class LookupEmbedder(Embedder):
    """Text ``"<row>"`` -> row of a fixed table of random unit vectors."""

    def __init__(self, table: np.ndarray) -> None:
        self.table = table
        self.dim = table.shape[1]
        self.name = f"lookup(n={table.shape[0]},dim={self.dim})"

    def embed(self, texts: list[str]) -> np.ndarray:
        return self.table[np.fromiter((int(t) for t in texts), dtype=np.int64, count=len(texts))]


class TimedScorer:
    """Wraps the scorer to time the client-side part of a round."""

    def __init__(self, scorer: SimilarityScorer) -> None:
        self.scorer = scorer
        self.seconds = 0.0

    def __call__(self, batch: ClientBatch, synthetic: np.ndarray) -> np.ndarray:
        start = time.perf_counter()
        rows = self.scorer(batch, synthetic)
        self.seconds = time.perf_counter() - start
        return rows


def best_time(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def clip_sum_f32(rows: np.ndarray, clip_norm: float) -> np.ndarray:
    """Clip rows to ``clip_norm`` and sum them, in one float32 pass (no copies of ``rows``)."""
    norms = np.sqrt(np.einsum("ij,ij->i", rows, rows))
    if not np.all(np.isfinite(norms)):
        raise ValueError("non-finite row")
    scale = np.minimum(np.float32(1.0), np.float32(clip_norm) / np.maximum(norms, 1e-12))
    return (scale.astype(rows.dtype) @ rows).astype(np.float64)


def run(clients: int, per_client: int, synthetic: int, dim: int, repeats: int) -> dict:
    rng = np.random.default_rng(0)
    table = unit_rows(rng.standard_normal((clients * per_client, dim), dtype=np.float32))
    syn = unit_rows(rng.standard_normal((synthetic, dim), dtype=np.float32))
    data = {
        f"c{i:06d}": [{"text": str(i * per_client + j)} for j in range(per_client)]
        for i in range(clients)
    }
    pool = ClientPool(data, ledger=PrivacyLedger(), seed=0)
    scorer = TimedScorer(SimilarityScorer(LookupEmbedder(table)))

    def one_round() -> np.ndarray:
        return pool.aggregate(
            scorer,
            syn,
            dim=synthetic,
            clip_norm=1.0,
            noise_multiplier=1.0,
            label="bench",
            batched=True,
        ).noisy_sum

    start = time.perf_counter()
    one_round()
    cold, cold_client = time.perf_counter() - start, scorer.seconds
    warm_runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        one_round()
        warm_runs.append((time.perf_counter() - start, scorer.seconds))
    warm, warm_client = min(warm_runs)

    flops = 2.0 * clients * synthetic * dim
    means = rng.standard_normal((clients, dim), dtype=np.float32)
    numpy_mm = best_time(lambda: means @ syn.T, repeats)
    result = {
        "clients": clients,
        "samples_per_client": per_client,
        "synthetic": synthetic,
        "dim": dim,
        "gflop_per_round": flops / 1e9,
        "cold_round_s": cold,
        "cold_client_fn_s": cold_client,
        "warm_round_s": warm,
        "warm_client_fn_s": warm_client,
        "warm_pool_generic_s": warm - warm_client,
        "numpy_matmul_s": numpy_mm,
        "numpy_matmul_gflops": flops / numpy_mm / 1e9,
        "warm_round_gflops": flops / warm / 1e9,
        "client_fn_gflops": flops / warm_client / 1e9,
    }
    try:
        import torch

        a, b = torch.from_numpy(means), torch.from_numpy(syn)
        torch_mm = best_time(lambda: a @ b.T, repeats)
        result["torch_matmul_s"] = torch_mm
        result["torch_matmul_gflops"] = flops / torch_mm / 1e9
        result["torch_threads"] = torch.get_num_threads()
    except ImportError:
        pass
    peak = max(result["numpy_matmul_gflops"], result.get("torch_matmul_gflops", 0.0))
    result["matmul_gflops"] = peak
    result["warm_round_fraction_of_matmul"] = result["warm_round_gflops"] / peak
    scores = means @ syn.T
    result["clip_sum_f32_s"] = best_time(lambda: clip_sum_f32(scores, 1.0), repeats)
    result["projected_round_s"] = warm_client + result["clip_sum_f32_s"]
    result["projected_fraction_of_matmul"] = flops / result["projected_round_s"] / 1e9 / peak
    result["machine"] = {
        "cpus": os.cpu_count(),
        "processor": platform.processor() or platform.machine(),
        "numpy": np.__version__,
    }
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=10_000)
    parser.add_argument("--samples-per-client", type=int, default=6)
    parser.add_argument("--synthetic", type=int, default=18_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    result = run(args.clients, args.samples_per_client, args.synthetic, args.dim, args.repeats)
    width = max(len(k) for k in result)
    for key, value in result.items():
        shown = f"{value:.4g}" if isinstance(value, float) else value
        print(f"{key:<{width}}  {shown}")
    if args.json:
        with open(args.json, "w") as sink:
            json.dump(result, sink, indent=1)


if __name__ == "__main__":
    main()
