"""The preference track's judge gate: how often each offline judge sides with the human.

A win-rate judge is an instrument: before it ranks releases it should prefer what people
prefer, on the two kinds of pair the track's win rate is made of. On a split part (default:
the ``prefs`` suite's public part, never the test tuples the suite scores) it measures, per
judge, the fraction of pairs where it picks the human side (ties count one half) with its
binomial standard error:

- ``human_vs_human``: the tuple's chosen reply (what the person wrote in that
  conversation) against its rejected one (a same-topic reply another person wrote for
  another conversation): the human choice is the chosen reply;
- ``model_vs_human``: the chosen reply against the base policy's greedy reply to the same
  prompt (the ε = 0 row's answer, made as ``win_rate`` makes it, ``--tokens`` tokens): the
  human choice is the reply a person wrote, the construction of ``chitchat_prefs`` itself
  (a person's own reply in context is preferred over any other). 1 − this is the win rate
  the base model gets from the judge on public prompts.

The gate (:data:`GATE`): both at least 70 %. A judge that shares its weights with the
policy's start fails the second by construction: greedy decoding maximises that model's
own log-likelihood, which is the first term of the ``pmi`` score (the SmolLM2 rows below).

Measured on ``chitchat_prefs`` (the ``prefs`` split), the first 100 public pairs, one
thread on the shared 2 cores; the figures are committed in
``docs/measurements/judge_agreement.json`` and quoted in ``docs/papers/paper003.md``
(earlier, human vs human only, 300 pairs, SmolLM2 as judge: ``pmi`` 74.3 %, ``loglik``
57.7 %, ``llm`` 55.0 % with either template).

Run: ``.venv/bin/python measurements/judge_agreement.py --n 100 --judges gemma-pmi smollm2-pmi
--answers base-replies.json --out docs/measurements/judge_agreement.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmark.evaluation.judges import ScoreJudge

GATE = 0.70
NULL_PROMPT = "\n\nHuman: "
JUDGES: dict[str, dict[str, Any] | None] = {
    "gemma-pmi": {"type": "pmi", "null_prompt": NULL_PROMPT, "lm": "gemma-3-270m"},
    "gemma-loglik": {"type": "loglik", "lm": "gemma-3-270m"},
    "smollm2-pmi": {"type": "pmi", "null_prompt": NULL_PROMPT},
    "smollm2-loglik": {"type": "loglik"},
    "smollm2-llm-hh": {"type": "llm", "template": "hh"},
    "mpnet-reward": None,  # the prefs suite's own judge: see prefs_judge
}


def prefs_judge() -> dict[str, Any]:
    """The judge the ``prefs`` suite scores win rate with: the suite's definition is the one
    place that names its reward head, so the gate measures the judge the track uses."""
    from leaderboard.catalog import get_suite

    (metric,) = [m for m in get_suite("prefs").metrics if m["name"] == "win_rate"]
    return dict(metric["settings"]["judge"])


def agreement(verdicts: np.ndarray) -> dict[str, float]:
    """Mean verdict for the human side, with its binomial standard error."""
    share = float(verdicts.mean())
    return {"agreement": share, "standard_error": math.sqrt(share * (1 - share) / len(verdicts))}


def base_answers(profile: Any, prompts: list[str], tokens: int, keep: Path | None) -> list[str]:
    """The untouched preference policy's greedy replies, made as ``WinRate._answers``;
    kept in ``keep`` (JSON, with the prompts they answer) and read back from there."""
    from benchmark.profiles.base import SamplingParams
    from benchmark.profiles.hf_generator import HFGenerator

    kept = json.loads(keep.read_text()) if keep and keep.exists() else {}
    if kept.get("prompts") == prompts and kept.get("max_new_tokens") == tokens:
        return list(kept["answers"])
    start = profile.preference_policy()
    policy = HFGenerator(start.model, start.tokenizer, name="base policy")
    answers = policy.generate(prompts, SamplingParams(max_new_tokens=tokens, temperature=0.0))
    if keep:
        keep.write_text(
            json.dumps({"prompts": prompts, "max_new_tokens": tokens, "answers": answers})
        )
    return answers


def human_side_verdicts(
    judge: Any, prompts: list[str], human: list[str], others: list[list[str]]
) -> list[np.ndarray]:
    """The judge's verdict for ``human`` against each list of ``others``; a score judge
    scores every response once (the human replies are in every pair)."""
    if not isinstance(judge, ScoreJudge):
        return [judge.compare(prompts, human, other) for other in others]
    mine = judge.score(prompts, human)
    theirs = [judge.score(prompts, other) for other in others]
    return [np.where(mine > t, 1.0, np.where(mine < t, 0.0, 0.5)) for t in theirs]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--splits", type=Path, default=Path("data/splits"))
    parser.add_argument("--part", default="public")
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--profile", default="cpu")
    parser.add_argument("--judges", nargs="+", default=list(JUDGES), choices=list(JUDGES))
    parser.add_argument("--out", type=Path)
    parser.add_argument("--answers", type=Path, help="keep the base model's replies here")
    args = parser.parse_args()

    from benchmark.evaluation.judges import judge_generator, make_judge
    from benchmark.profiles import get_profile
    from benchmark.split_storage import load_split
    from leaderboard.catalog import get_suite
    from leaderboard.suites import ensure_split

    split = load_split(ensure_split(get_suite("prefs"), args.splits))
    records = split.records(args.part)[: args.n]
    prompts = [r["prompt"] for r in records]
    chosen, rejected = [r["chosen"] for r in records], [r["rejected"] for r in records]
    profile = get_profile(args.profile)
    start = time.perf_counter()
    answers = base_answers(profile, prompts, args.tokens, args.answers)
    report: dict[str, Any] = {
        "split": split.name,
        "part": args.part,
        "pairs": len(records),
        "policy": profile.preference_policy().name,
        "max_new_tokens": args.tokens,
        "answer_seconds": round(time.perf_counter() - start, 1),
        "gate": GATE,
        "judges": {},
    }
    for name in args.judges:
        spec = JUDGES[name]
        spec = prefs_judge() if spec is None else spec
        start = time.perf_counter()
        judge = make_judge(spec, judge_generator(spec, profile), seed=0)
        verdicts = human_side_verdicts(judge, prompts, chosen, [rejected, answers])
        human, model = (agreement(v) for v in verdicts)
        report["judges"][name] = {
            "judge": spec,
            "human_vs_human": human,
            "model_vs_human": model,
            "passes_gate": min(human["agreement"], model["agreement"]) >= GATE,
            "seconds": round(time.perf_counter() - start, 1),
        }
        print(json.dumps({name: report["judges"][name]}), flush=True)
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
