"""How often each offline judge sides with the human choice on real preference pairs.

A win-rate judge is an instrument: before it ranks releases it should prefer what people
prefer. This script asks each offline judge to compare every (prompt, chosen, rejected)
tuple of a split part (default: the ``prefs`` suite's public part, never the test tuples
the suite scores) and reports the fraction where it picks the human's chosen reply (ties
count one half), with its binomial standard error and the wall time.

Measured on ``chitchat_prefs`` (the ``prefs`` split), 300 public pairs, SmolLM2-135M as the
judge, one thread, the other core busy (2026-11-25):

=========================  =========  ======
judge                      agreement  time
=========================  =========  ======
``pmi`` (null "Human:")    74.3 %     234 s
``loglik``                 57.7 %     453 s
``llm``, ``hh`` template   55.0 %     397 s
``llm``, generic template  55.0 %     260 s
=========================  =========  ======

(standard error ≈ 2.9 points each; ``loglik`` ran beside the test suite, so its time is
inflated.) Hence ``leaderboard.suites.PREFERENCE_JUDGE``.

Run: ``.venv/bin/python measurements/judge_agreement.py [--part public] [--n 300]``.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

JUDGES = (
    {"type": "pmi", "null_prompt": "\n\nHuman: "},
    {"type": "loglik"},
    {"type": "llm", "template": "hh"},
    {"type": "llm", "template": "generic"},
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--splits", type=Path, default=Path("data/splits"))
    parser.add_argument("--part", default="public")
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--profile", default="cpu")
    args = parser.parse_args()

    from benchmark.evaluation.judges import make_judge
    from benchmark.profiles import get_profile
    from benchmark.split_storage import load_split
    from leaderboard.catalog import get_suite
    from leaderboard.suites import ensure_split

    split = load_split(ensure_split(get_suite("prefs"), args.splits))
    records = split.records(args.part)[: args.n]
    prompts = [r["prompt"] for r in records]
    chosen, rejected = [r["chosen"] for r in records], [r["rejected"] for r in records]
    generator = get_profile(args.profile).generator()
    for spec in JUDGES:
        start = time.perf_counter()
        wins = make_judge(spec, generator, seed=0).compare(prompts, chosen, rejected)
        agree = float(wins.mean())
        result = {
            "judge": spec,
            "pairs": len(records),
            "agreement": agree,
            "standard_error": math.sqrt(agree * (1 - agree) / len(records)),
            "seconds": round(time.perf_counter() - start, 1),
        }
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
