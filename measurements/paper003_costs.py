"""What paper 003's pieces cost at ``cpu`` scale, to size the ``prefs`` suite's configs.

Times, on the chitchat preference split and the ``cpu`` profile (SmolLM2-135M policy and
generator, MiniLM embedder), one thread unless ``--threads``:

- DP-FT: one per-example DP-SGD gradient (an SFT tuple; a DPO pair), the harness's loop;
- alignment: one SFT + DPO step of a batch of pairs (the evaluator's downstream);
- DPPrefSyn: embedding the private tuples, and sampling candidates per public prompt.

    python measurements/paper003_costs.py --split data/splits/chitchat-prefs --examples 8

Run it on a quiet machine; it prints seconds per unit and the implied time of one run.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch


def seconds(fn, repeat: int) -> float:
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - start) / repeat


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", type=Path, required=True)
    parser.add_argument("--examples", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--max-completion-tokens", type=int, default=64)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from benchmark.federation.local_dp_sgd import lm_loss
    from benchmark.federation.preference_dp_sgd import dpo_examples, dpo_pair_loss, sft_examples
    from benchmark.preference_training import AlignmentConfig, train_completions, train_dpo
    from benchmark.profiles import get_profile
    from benchmark.profiles.base import SamplingParams
    from benchmark.profiles.hf_generator import context_length
    from benchmark.split_storage import load_split

    split = load_split(args.split)
    train = split.records("train")
    records = train[: args.examples]
    profile = get_profile("cpu")
    generator = profile.generator()
    model, tokenizer = generator.model, generator.tokenizer
    n, k, context = len(train), args.max_completion_tokens, context_length(model)

    sft = sft_examples(tokenizer, records, k, context)
    dpo = dpo_examples(model, tokenizer, records, k, context)
    model.train()
    per_sft = seconds(lambda: lm_loss(model, sft[0]).backward(), len(sft))
    pair_loss = dpo_pair_loss(0.1)
    per_dpo = seconds(lambda: pair_loss(model, dpo[0]).backward(), len(dpo))
    model.zero_grad(set_to_none=True)
    model.eval()
    half = n / 2
    print(
        f"DP-FT: {per_sft:.2f} s per SFT tuple, {per_dpo:.2f} s per DPO pair; one epoch "
        f"over a half ({half:.0f}) = {half * (per_sft + per_dpo) / 3600:.1f} h"
    )

    pairs = [{f: str(r[f]) for f in ("prompt", "chosen", "rejected")} for r in records]
    config = AlignmentConfig(batch_size=len(pairs), max_completion_tokens=k, dpo_epochs=1)
    start = time.perf_counter()
    train_completions(
        model, tokenizer, [(p["prompt"], p["chosen"]) for p in pairs], config.sft(), 0
    )
    train_dpo(model, tokenizer, pairs, config, 0)
    per_pair = (time.perf_counter() - start) / len(pairs)
    print(f"alignment: {per_pair:.2f} s per pair (SFT + 1 DPO epoch)")

    texts = [str(r["prompt"]) + str(r["chosen"]) for r in train[:256]]
    per_text = seconds(lambda: profile.embedder().embed(texts), 1) / len(texts)
    print(
        f"embedding: {per_text * 1000:.1f} ms per text; the private differences "
        f"({2 * n} texts) = {2 * n * per_text / 60:.1f} min"
    )

    prompts = [str(r["prompt"]) for r in split.records("public")[:4]] * 5
    params = SamplingParams(max_new_tokens=k, temperature=0.9)
    per_candidate = seconds(lambda: generator.generate(prompts, params, chat=False), 1) / len(
        prompts
    )
    print(
        f"candidates: {per_candidate:.2f} s per response of {k} tokens; 1,000 prompts x 5 "
        f"= {5000 * per_candidate / 60:.0f} min"
    )


if __name__ == "__main__":
    main()
