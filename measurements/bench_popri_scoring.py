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

Each private release also recomputes ``--independence-checks`` sampled clients alone, each
in a fresh fork that unpickles the job (``benchmark/untrusted/zygote.py``); that is part
of ``warm_pool_generic_s``, and ``--independence-checks 0`` shows its cost.

With ``--isolated`` the round runs as on the isolated path (``benchmark/isolation``): the
job is pickled (``job_pickle_s``, the method process's hop), sent to a sandboxed client
worker that runs the scorer and writes the rows into a shared memory file, which the
coordinator copies out block by block (~32 MB), clipping and summing each, then noises.
``warm_round_s`` then includes every hop; the client function's own time is not visible
from the coordinator (``nan``).

Run: ``.venv/bin/python measurements/bench_popri_scoring.py [--isolated] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmark.federation.clients import ClientBatch
from benchmark.federation.pool import INDEPENDENCE_CHECKS, ClientPool
from benchmark.privacy.ledger import PrivacyLedger
from benchmark.profiles.base import Embedder
from benchmark.protocol.jobs import snapshot
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


def isolated_pool(data: dict, scratch: Path, checks: int) -> tuple[ClientPool, Any]:
    """The pool as an isolated run has it: client code in a sandboxed client worker."""
    import torch

    from benchmark.isolation.client_process import ClientProcess
    from benchmark.isolation.coordinator import harness_code, policy_for

    shards = [data[cid] for cid in sorted(data)]
    policy = policy_for(harness_code(), [scratch])
    worker = ClientProcess(shards, policy, torch.get_num_threads(), scratch)
    pool = ClientPool(
        data, ledger=PrivacyLedger(), seed=0, executor=worker, independence_checks=checks
    )
    return pool, worker


def run(
    clients: int,
    per_client: int,
    synthetic: int,
    dim: int,
    repeats: int,
    isolated: bool,
    checks: int = INDEPENDENCE_CHECKS,
) -> dict:
    rng = np.random.default_rng(0)
    table = unit_rows(rng.standard_normal((clients * per_client, dim), dtype=np.float32))
    syn = unit_rows(rng.standard_normal((synthetic, dim), dtype=np.float32))
    data = {
        f"c{i:06d}": [{"text": str(i * per_client + j)} for j in range(per_client)]
        for i in range(clients)
    }
    scratch = Path(tempfile.mkdtemp(prefix="bench-popri-"))
    pool, worker = (
        isolated_pool(data, scratch, checks)
        if isolated
        else (ClientPool(data, ledger=PrivacyLedger(), seed=0, independence_checks=checks), None)
    )
    scorer = TimedScorer(SimilarityScorer(LookupEmbedder(table)))
    hops = {"job_pickle_s": 0.0, "job_bytes": 0}

    def one_round() -> np.ndarray:
        fn, payload = scorer, syn
        if isolated:  # what the method process sends: the pickled job (timed: a hop)
            start = time.perf_counter()
            fn, payload = snapshot(scorer, syn), None
            hops["job_pickle_s"], hops["job_bytes"] = time.perf_counter() - start, len(fn)
        return pool.aggregate(
            fn,
            payload,
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
    if worker is not None:  # the client function ran in the worker: its time is not ours
        worker.close()
        cold_client = warm_client = float("nan")

    flops = 2.0 * clients * synthetic * dim
    means = rng.standard_normal((clients, dim), dtype=np.float32)
    numpy_mm = best_time(lambda: means @ syn.T, repeats)
    result = {
        "path": "isolated (client worker, shared-memory rows)" if isolated else "in process",
        **(
            {"job_pickle_s": hops["job_pickle_s"], "job_mb": hops["job_bytes"] / 1e6}
            if isolated
            else {}
        ),
        "independence_checks": checks,
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
    parser.add_argument(
        "--isolated",
        action="store_true",
        help="run client code in a sandboxed client worker, as fedsynth run and the suites do",
    )
    parser.add_argument(
        "--independence-checks",
        type=int,
        default=INDEPENDENCE_CHECKS,
        help="clients recomputed alone per release (the pool's default; 0 shows its cost)",
    )
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    result = run(
        args.clients,
        args.samples_per_client,
        args.synthetic,
        args.dim,
        args.repeats,
        args.isolated,
        args.independence_checks,
    )
    width = max(len(k) for k in result)
    for key, value in result.items():
        shown = f"{value:.4g}" if isinstance(value, float) else value
        print(f"{key:<{width}}  {shown}")
    if args.json:
        with open(args.json, "w") as sink:
            json.dump(result, sink, indent=1)


if __name__ == "__main__":
    main()
