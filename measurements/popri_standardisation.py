"""POPri's client scores with and without per-client standardisation, under the real noise.

Issue 10 asks for both of POPri's scoring rules to be measured: Algorithm 4 of paper 000 (a
client's row = mean cosine similarity of each synthetic sample to its own texts, clipped to
norm 1) and the public reference code's variant, which z-scores each client's row before
clipping (``standardize_scores``; client-local, so it costs no privacy). What the rules
change is which sample of each prompt becomes DPO's *chosen* and *rejected* one, so that is
what is measured, on a built split with the profile's embedder:

- **samples**: ``K`` groups of ``J`` public texts standing in for the ``J`` samples of one
  prompt. A group is an anchor text and its ``J - 1`` nearest public neighbours, because the
  samples of one prompt are close to each other (random groups would make ranking easy);
- **clients**: every train client of the split (the cpu configs' full participation), each
  row computed by the method's own client function (``SimilarityScorer``) and clipped to
  norm 1 as the pool does;
- **noise**: the Gaussian noise POPri's rounds get at the given ε (``noise_multiplier_for``
  with the run's rounds, δ and sampling rate 1, as ``POPri.noise_multiplier``), drawn
  ``--noise-draws`` times per sample set.

Reported per rule and ε: ``chosen_kept`` (the noisy chosen sample is the noise-free one);
``pair_right_under_raw`` / ``_under_z`` (the noisy chosen sample outscores the noisy
rejected one under that rule's noise-free scores: under its own rule this is the noise's
harm, under the other whether the two rules prefer the same samples); the within-prompt
spread of the noise-free scores over σ; and the noise-free agreement of the two rules'
chosen samples. Means over ``--sample-sets`` × ``--noise-draws``.

Run: ``.venv/bin/python measurements/popri_standardisation.py --split DIR [--profile cpu]
[--epsilon 1 7] [--json out.json]`` (the bench split: ``fedsynth splits build chitchat
--option cap=1`` or the suite's own split directory).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np

from benchmark.federation.clients import ClientBatch, ClientData, client_scope
from benchmark.federation.pool import clipped_row_sum
from benchmark.privacy.accountants import noise_multiplier_for
from benchmark.profiles import get_profile
from benchmark.split_storage import load_split
from methods.popri_scoring import SimilarityScorer, preference_indices, unit_rows

RULES = {"raw": False, "z": True}


def prompt_groups(
    public: np.ndarray, prompts: int, per_prompt: int, rng: np.random.Generator
) -> np.ndarray:
    """Indices (prompts × per_prompt) of anchors and their nearest distinct public texts."""
    anchors = rng.choice(len(public), size=prompts, replace=False)
    groups = []
    for anchor in anchors:
        order = np.argsort(-(public @ public[anchor]), kind="stable")
        groups.append(order[:per_prompt])
    return np.stack(groups)


def client_rows(clients: list[ClientData], synthetic: np.ndarray, standardize: bool, embedder):
    """Every client's row from the method's own client function, in one batch."""
    scorer = SimilarityScorer(embedder, standardize=standardize)
    with client_scope():
        return scorer(ClientBatch(clients), synthetic)


def measure(
    split_dir: str,
    profile_name: str,
    epsilons: list[float],
    delta: float,
    rounds: int,
    prompts: int,
    per_prompt: int,
    rejected_rank: int,
    sample_sets: int,
    noise_draws: int,
    seed: int,
) -> dict[str, Any]:
    split = load_split(split_dir)
    embedder = get_profile(profile_name).embedder()
    clients = [ClientData(records, {}) for records in split.by_client("train").values()]
    public = unit_rows(embedder.embed(split.texts("public")))
    rng = np.random.default_rng(seed)
    sums: dict[str, list[np.ndarray]] = {rule: [] for rule in RULES}
    for _ in range(sample_sets):
        synthetic = public[prompt_groups(public, prompts, per_prompt, rng).ravel()]
        for rule, standardize in RULES.items():
            rows = client_rows(clients, synthetic, standardize, embedder)
            sums[rule].append(clipped_row_sum(rows, clip_norm=1.0))

    def pair(scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return preference_indices(scores, prompts, per_prompt, rejected_rank)

    result: dict[str, Any] = {"clients": len(clients), "public_texts": len(public)}
    clean_chosen = {rule: [pair(s)[0] for s in sums[rule]] for rule in RULES}
    pairs = zip(clean_chosen["raw"], clean_chosen["z"], strict=True)
    result["clean_chosen_agreement"] = float(np.mean([np.mean(a == b) for a, b in pairs]))
    # how far apart the J samples of a prompt score, noise-free (the signal the noise meets)
    spread = {
        r: [s.reshape(prompts, per_prompt).std(axis=1).mean() for s in sums[r]] for r in RULES
    }
    for epsilon in epsilons:
        sigma = noise_multiplier_for(epsilon, delta, sample_rate=1.0, steps=rounds)
        row: dict[str, Any] = {"sigma": sigma}
        for rule in RULES:
            kept, right = [], {other: [] for other in RULES}
            for index, clean in enumerate(sums[rule]):
                for _ in range(noise_draws):
                    chosen, rejected = pair(clean + rng.normal(0.0, sigma, clean.shape))
                    kept.append(np.mean(chosen == clean_chosen[rule][index]))
                    for other in RULES:
                        reference = sums[other][index]
                        right[other].append(np.mean(reference[chosen] > reference[rejected]))
            row[rule] = {
                "chosen_kept": float(np.mean(kept)),
                **{f"pair_right_under_{o}": float(np.mean(v)) for o, v in right.items()},
                "score_spread_over_sigma": float(np.mean(spread[rule]) / sigma),
            }
        result[f"epsilon={epsilon:g}"] = row
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", required=True, help="a built split directory")
    parser.add_argument("--profile", default="cpu")
    parser.add_argument("--epsilon", type=float, nargs="+", default=[1.0, 7.0])
    parser.add_argument("--delta", type=float, default=1e-5)
    parser.add_argument("--rounds", type=int, default=3, help="POPri's T (cpu config: 3)")
    parser.add_argument("--prompts", type=int, default=24, help="K (cpu config: 24)")
    parser.add_argument("--samples-per-prompt", type=int, default=10, help="J (cpu: 10)")
    parser.add_argument("--rejected-rank", type=int, default=5, help="ℓ (cpu: 5)")
    parser.add_argument("--sample-sets", type=int, default=10)
    parser.add_argument("--noise-draws", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    result = measure(
        args.split, args.profile, args.epsilon, args.delta, args.rounds, args.prompts,
        args.samples_per_prompt, args.rejected_rank, args.sample_sets, args.noise_draws,
        args.seed,
    )  # fmt: skip
    print(json.dumps(result, indent=1))
    if args.json:
        with open(args.json, "w") as sink:
            json.dump(result, sink, indent=1)


if __name__ == "__main__":
    main()
