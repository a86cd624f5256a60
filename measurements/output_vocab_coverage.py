"""How much of Gemma 3 270M's next-token distribution a public-corpus output vocabulary
drops (issue 32 item 9: restricting Gemma's output vocabulary, validated and recorded).

Restricting sampling to a token set S renormalises each step's distribution over S; the
total-variation distance between the restricted and the full step is exactly the full
step's probability mass outside S. So this measures, on public data only:

- ``mass_outside``: that mass, averaged over every position of a public text written as
  the 4th example of a 3-shot prompt (the prompt construction of ``generator_only`` and
  POPri, :func:`methods.private_evolution.few_shot_prompt`), teacher-forced;
- ``sampled_outside``: the fraction of tokens the unrestricted generator samples
  (temperature 1, top-p 1, as the release) from such prompts that fall outside S;
- ``public_tokens_outside``: the fraction of those public texts' tokens outside S (text
  the restricted generator cannot write verbatim).

S is :func:`benchmark.profiles.cpu.public_output_ids`: the token ids of the profile's
packaged public corpus and of the split's public part. So that S does not contain the
texts it is measured on, the public part is cut in two halves at random: S takes one
(``corpus + public half``), the prompts and texts measured come from the other; the
corpus alone (``corpus``) is measured beside it.

    python measurements/output_vocab_coverage.py --split data/splits/chitchat-bench
        [--prompts 200] [--samples 64] [--out report.json]
"""

from __future__ import annotations

import argparse
import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from benchmark.profiles.base import SamplingParams  # noqa: E402
from benchmark.profiles.cpu import GEMMA, public_output_ids  # noqa: E402
from benchmark.profiles.hf_generator import HFGenerator  # noqa: E402
from benchmark.split_storage import load_split  # noqa: E402
from methods.private_evolution import few_shot_prompt, parse_generated  # noqa: E402


def mass_outside(
    model, tokenizer, prompts: list[str], texts: list[str], sets: dict[str, list[int]]
) -> dict[str, float]:
    """Per token set, the mean probability mass outside it over the positions that predict
    ``texts`` after ``prompts`` (one forward per pair)."""
    inside = {}
    for name, allowed in sets.items():
        inside[name] = torch.zeros(model.config.vocab_size, dtype=torch.bool)
        inside[name][allowed] = True
    masses: dict[str, list[float]] = {name: [] for name in sets}
    with torch.inference_mode():
        for prompt, text in zip(prompts, texts, strict=True):
            head = tokenizer(prompt)["input_ids"]
            tail = tokenizer(text.strip(), add_special_tokens=False)["input_ids"]
            ids = torch.tensor([head + tail])
            probs = model(ids, logits_to_keep=len(tail) + 1).logits[0, :-1].float().softmax(-1)
            for name, mask in inside.items():
                masses[name].extend(probs[:, ~mask].sum(-1).tolist())
    return {name: float(np.mean(m)) for name, m in masses.items()}


def outside(ids: list[int], allowed: list[int]) -> float:
    allowed_set = set(allowed)
    return sum(i not in allowed_set for i in ids) / len(ids)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", required=True)
    parser.add_argument("--prompts", type=int, default=200)
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--out")
    args = parser.parse_args()
    model, tokenizer = GEMMA.load()
    public = [t for t in load_split(args.split).texts("public") if t.split()]
    rng = np.random.default_rng(0)
    order = rng.permutation(len(public))
    vocabulary_half = [public[i] for i in order[: len(public) // 2]]
    measured = [public[i] for i in order[len(public) // 2 :]]
    sets = {
        "corpus": public_output_ids(tokenizer, []),
        "corpus + public half": public_output_ids(tokenizer, vocabulary_half),
    }
    picks = [rng.choice(len(measured), 4, replace=False) for _ in range(args.prompts)]
    prompts = [few_shot_prompt([measured[i] for i in p[:3]]) for p in picks]
    targets = [measured[p[3]] for p in picks]
    measured_ids = [
        i for t in measured for i in tokenizer(t, add_special_tokens=False)["input_ids"]
    ]
    full = HFGenerator(model, tokenizer, GEMMA.label, batch_size=32, fast_sampling=True)
    sampled = full.generate(prompts[: args.samples], SamplingParams(64, 1.0, 1.0, 0), chat=False)
    sampled_ids = [
        i for t in sampled for i in tokenizer(parse_generated(t), add_special_tokens=False)[
            "input_ids"]
    ]  # fmt: skip
    masses = mass_outside(model, tokenizer, prompts, targets, sets)
    report = {
        "generator": GEMMA.label,
        "split": args.split,
        "vocabulary": model.config.vocab_size,
        "prompts": args.prompts,
        "sampled_tokens": len(sampled_ids),
        "public_tokens": len(measured_ids),
        "sets": {
            name: {
                "output_ids": len(ids),
                "mass_outside": masses[name],
                "sampled_outside": outside(sampled_ids, ids),
                "public_tokens_outside": outside(measured_ids, ids),
            }
            for name, ids in sets.items()
        },
    }
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
