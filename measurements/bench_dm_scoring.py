"""Time paper 002's distribution-matching scoring of the public corpus (Algorithm 1, (2)-(3)).

At the mid-training pause ``dp_ftrl_dm`` scores every public record by its mean-token
log p_priv under the current on-device model plus its mean-token log p_pub under the public
LLM, then keeps the top q. Reported, in records per second, on the ``bench`` suite's public
part (the corpus of the ``paper002`` suite) at the ``cpu`` config:

- ``teacher_pass``: the public LLM's one pass (top-k logits and log p_pub per record; cached
  after its first run, so a grid pays it once). Run cold here, into a temporary cache;
- ``ondevice_<model>``: log p_priv under the LSTM and the transformer (step (2), paid at
  every pause), best of ``--repeats``;
- ``select``: the top-q selection over the summed scores (step (3)).

The on-device models are freshly initialised: the cost does not depend on their weights.
Threads: ``torch.get_num_threads()`` as set by ``OMP_NUM_THREADS`` (reported).

Run: ``.venv/bin/python measurements/bench_dm_scoring.py [--splits DIR] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any


def best_of(repeats: int, work: Any) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--splits", type=Path, default=Path("runs/paper002/splits"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    os.environ["FEDSYNTH_CACHE"] = tempfile.mkdtemp(prefix="fedsynth-dm-bench-")

    import numpy as np
    import torch

    from benchmark.data import TEXT
    from benchmark.evaluation.downstream import sequence_losses
    from benchmark.profiles import get_profile
    from benchmark.profiles.ondevice_kinds import SmallOnDeviceLM, SmallShape, ondevice_tokenizer
    from benchmark.profiles.teacher_corpus import teacher_corpus
    from benchmark.split_storage import load_split
    from leaderboard.catalog import get_suite
    from leaderboard.suites import ensure_split
    from methods.dp_ftrl_dm import DPFTRLDM
    from methods.public_training import top_fraction

    cfg = DPFTRLDM.resolve_config("cpu", {})
    split = load_split(ensure_split(get_suite("bench"), args.splits))
    texts = [r[TEXT] for r in split.records("public")]
    profile = get_profile("cpu")
    result: dict[str, Any] = {"records": len(texts), "threads": torch.get_num_threads()}

    start = time.perf_counter()
    teacher = teacher_corpus(profile.public_llm(), texts, cfg["max_length"], cfg["distill_top_k"])
    result["teacher_pass_records_per_s"] = len(texts) / (time.perf_counter() - start)

    tokenizer = ondevice_tokenizer(profile, "public_llm", texts)
    scores = {}
    for model_kind in ("lstm", "transformer"):
        shape = SmallShape(
            model_kind, cfg["embedding_size"], cfg["hidden_size"], cfg["num_heads"],
            max(512, cfg["max_length"]),
        )  # fmt: skip
        model = SmallOnDeviceLM(tokenizer, shape, "public_llm").new_model(0)
        model.eval()

        def score(model: Any = model, kind: str = model_kind) -> None:
            scores[kind] = -sequence_losses(model, tokenizer, texts, cfg["max_length"])

        seconds = best_of(args.repeats, score)
        result[f"ondevice_{model_kind}_records_per_s"] = len(texts) / seconds

    total = np.asarray(scores["transformer"] + teacher.mean_logprob, dtype=np.float64)
    seconds = best_of(args.repeats, lambda: top_fraction(total, cfg["midtrain_fraction"]))
    result["select_records_per_s"] = len(texts) / seconds
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
