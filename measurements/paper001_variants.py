"""Paper 001's variants of ``fed_ctg`` on a labelled offline split (``cpu`` profile).

Runs Pre., Pre. + refinement, ε = ∞, ε = 8 without and with refinement and the uniform
sampling control (Table A.14), each over ``--seeds``, through the isolated path, and writes
one result record per run plus a summary table to ``--out`` (results/paper001-cpu).

The split: chatterbot-corpus conversations (20 categories, the control codes), dealt IID
to 40 clients (paper 001's main setting is IID), 10 % of the clients held out for
validation and 20 % for test (a larger test share than the recipe's 10 %, so that the
classifier is scored on every category). δ = 1/(N ln N) for the N training clients
(``delta_rule: ln``); at N = 28 that is 1.07e-2, the paper's rule (1.09e-3 for Yelp's 100
clients), which exceeds 1/(number of samples) and so needs ``allow_large_delta``.

    python measurements/paper001_variants.py --seeds 0 1 2

Runs are resumable (the runner keys them by spec); records are rewritten from the runs.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from variant_table import read_records, summary, write_record

from benchmark.runner import run
from benchmark.spec import spec_from_dict
from benchmark.split_storage import is_complete, load_split

SPLIT_OPTIONS = {
    "partition": "iid",
    "partition_params": {"num_clients": 40},
    "validation_clients": 0.1,
    "test_clients": 0.2,
}
# The probe's C = 10: on the split's validation part (real texts; 5-fold CV, nothing a
# method released) C = 1 reaches accuracy 0.44 / macro-F1 0.13, C = 10 0.60 / 0.34 (100:
# 0.57 / 0.30): at C = 1 the unit-norm embeddings are regularised to the majority class.
METRICS = [
    {"name": "classification", "settings": {"c": 10.0}},
    {"name": "mauve", "settings": {}},
    {"name": "fid", "settings": {}},
]
# name → (ε, fed_ctg params)
VARIANTS: dict[str, tuple[float, dict[str, Any]]] = {
    "pre": (math.inf, {"finetune": False, "refinement": "none"}),
    "pre+refinement": (8.0, {"finetune": False, "refinement": "votes"}),
    "eps_inf": (math.inf, {"refinement": "none"}),
    "eps8": (8.0, {"refinement": "none"}),
    "eps8+refinement": (8.0, {"refinement": "votes"}),
    "eps8+uniform": (8.0, {"refinement": "uniform"}),
}
# The paper's zero-shot prompts name the genre (review, abstract); chatterbot's is dialogue.
COMMON_PARAMS = {
    "delta_rule": "ln",
    "zero_shot_template": "Please generate a conversation about topic {label}:\n\n",
}
REPORTED = ("classification.accuracy", "classification.macro_f1", "mauve.mauve", "fid.fid")


def build_split(root: Path) -> Path:
    from benchmark.registry import DATASETS
    from datasets_builders.pipeline import build_split as build
    from datasets_builders.pipeline import options_for

    out = root / "chatterbot-iid40"
    if not is_complete(out):
        source = DATASETS.get("chatterbot")()
        build(source, options_for(source, SPLIT_OPTIONS), out)
    return out


def run_variant(name: str, seed: int, split_path: Path, runs: Path) -> dict[str, Any]:
    epsilon, params = VARIANTS[name]
    clients = len(load_split(split_path).by_client("train"))
    spec = spec_from_dict(
        {
            "split": {"path": str(split_path)},
            "method": {"name": "fed_ctg", "params": {**params, **COMMON_PARAMS}},
            "privacy": {
                "epsilon": epsilon,
                "delta": 1 / (clients * math.log(clients)),
                "unit": "client_sample",
                "allow_large_delta": True,
            },
            "evaluation": {"metrics": METRICS},
            "seed": seed,
            "profile": "cpu",
        }
    )
    return run(spec, runs_root=runs, isolated=True).record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--work", type=Path, default=Path("runs/paper001"))
    parser.add_argument("--out", type=Path, default=Path("results/paper001-cpu"))
    args = parser.parse_args()
    split_path = build_split(args.work / "splits")
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.variants:
        for seed in args.seeds:
            record = run_variant(name, seed, split_path, args.work / "runs")
            write_record(args.out, name, seed, record)
            print(
                f"{name} seed {seed}: "
                + json.dumps({k: record["metrics"].get(k) for k in REPORTED})
            )
    # every record in --out, so that workers sharing it each leave a complete table
    table = summary(read_records(args.out, VARIANTS), REPORTED, epsilon_label="ε (worst group)")
    (args.out / "summary.md").write_text(table)


if __name__ == "__main__":
    main()
