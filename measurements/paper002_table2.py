"""Paper 002's Table 2 rows with ``dp_ftrl_dm`` at ``cpu`` scale, LSTM and transformer.

The population is the benchmark suite's chitchat split (5,816 private train clients, ≤ 4
spans each, 4,000 public spans from the month before; the ``bench`` suite builds it). The
public corpus D is the split's public part; the public LLM (tokenizer, teacher, p_pub) is
SmolLM2-135M-Instruct. Every row runs DP-FTRL for 24 rounds of 25 clients (one 24-leaf tree) at
paper 002's larger budget ε = 18.71, δ = 1e-6 (``--epsilon`` to change), through the
isolated path (``--in-process`` for the adapter in this process); rows differ only in
their public training (``ROWS``), as in Table 2.

The teacher pass over the public corpus is built here, in this trusted process, before any
run: a sandboxed method process may read that cache but not write it.

    python measurements/paper002_table2.py --seeds 0 1 2 --models lstm transformer

Runs resume (the runner keys them by spec); records are rewritten from the runs.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from variant_table import read_records, summary, write_record

from benchmark.runner import run
from benchmark.spec import spec_from_dict

# Table 2's rows → dp_ftrl_dm params (the rest is the cpu config: T = 24, T' = 12, q = 5 %
# of the public spans for mid-training, 25 % for distillation pre-training, β = 1e-2).
NO_MIDTRAIN = {"midtrain_round": None}
ROWS: dict[str, dict[str, Any]] = {
    "no_public": {**NO_MIDTRAIN, "distill_beta": 0.0},
    "pretrain_all": {**NO_MIDTRAIN, "pretrain": "all", "distill_beta": 0.0},
    "midtrain_distill_dm": {"midtrain_data": "dm"},
    "midtrain_random": {"midtrain_data": "random", "distill_beta": 0.0},
    "pretrain_distill": {**NO_MIDTRAIN, "pretrain": "random", "pretrain_fraction": 0.25},
    "midtrain_distill": {"midtrain_data": "random"},
    "midtrain_distill_dm_wo_ppub": {"midtrain_data": "dm_private_only"},
}
# Paper 002's metric (§2.5): in-vocabulary next-token accuracy, and the same in the public
# LLM's tokens (the §3.1 conversion; on the LLM's own vocabulary the two are equal).
# ``next_token`` scores only models on the instrument's vocabulary, which these are not.
METRICS = [{"name": "in_vocab", "settings": {}}]
DOWNSTREAM = {"max_length": 20}
REPORTED = ("in_vocab.top1_llm_tokens", "in_vocab.top1_in_vocab")


def build_split(root: Path) -> Path:
    from leaderboard.suites import ensure_split, get_suite

    return ensure_split(get_suite("bench"), root)


def warm_teacher(split_path: Path) -> None:
    """The public LLM's pass over the public spans, cached before the sandboxed runs."""
    from benchmark.data import TEXT
    from benchmark.profiles import get_profile
    from benchmark.profiles.teacher_corpus import teacher_corpus
    from benchmark.split_storage import load_split
    from methods.dp_ftrl_dm import DPFTRLDM

    config = DPFTRLDM.resolve_config("cpu", {})
    texts = [r[TEXT] for r in load_split(split_path).records("public")]
    llm = get_profile("cpu").public_llm()
    teacher_corpus(llm, texts, config["max_length"], config["distill_top_k"])


def run_row(
    row: str, model: str, seed: int, epsilon: float, split_path: Path, runs: Path, isolated: bool
) -> dict[str, Any]:
    spec = spec_from_dict(
        {
            "split": {"path": str(split_path)},
            "method": {"name": "dp_ftrl_dm", "params": {**ROWS[row], "model": model}},
            "privacy": {"epsilon": epsilon, "delta": 1e-6},
            "evaluation": {"metrics": METRICS, "downstream": DOWNSTREAM},
            "seed": seed,
            "profile": "cpu",
        }
    )
    return run(spec, runs_root=runs, isolated=isolated).record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--rows", nargs="+", default=list(ROWS), choices=list(ROWS))
    parser.add_argument("--models", nargs="+", default=["lstm", "transformer"])
    parser.add_argument("--epsilon", type=float, default=18.71)
    parser.add_argument("--work", type=Path, default=Path("runs/paper002"))
    parser.add_argument("--out", type=Path, default=Path("results/paper002-cpu"))
    parser.add_argument("--splits", type=Path, help="where the bench split is (default: --work)")
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="run the (built-in) adapter in this process: the isolated path moves each "
        "client's 46 MB update through a pipe, 2.5x the round time here",
    )
    args = parser.parse_args()
    split_path = build_split(args.splits or args.work / "splits")
    warm_teacher(split_path)
    args.out.mkdir(parents=True, exist_ok=True)
    for seed in args.seeds:
        for model in args.models:
            for row in args.rows:
                record = run_row(
                    row, model, seed, args.epsilon, split_path, args.work / "runs",
                    not args.in_process,
                )  # fmt: skip
                write_record(args.out, f"{model}-{row}", seed, record)
                metrics = {k: record["metrics"].get(k) for k in REPORTED}
                print(f"{model} {row} seed {seed}: {json.dumps(metrics)}", flush=True)
    names = [f"{m}-{r}" for m in ("lstm", "transformer") for r in ROWS]
    table = summary(read_records(args.out, names), REPORTED, scale=100.0)
    (args.out / "summary.md").write_text(table)


if __name__ == "__main__":
    main()
