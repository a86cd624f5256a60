"""Sampling throughput of the ``cpu`` generator (SmolLM2-135M-Instruct) at the methods' settings.

Generation is the budget of every LLM-based method on the ``cpu`` profile (PE / PrE-Text /
PE+SFT variations and final sets, POPri's K·J samples per round). This measures generated
tokens/s and texts/s of ``HFGenerator.generate`` for a 3-shot-sized prompt (≈ 240 tokens,
POPri's and PE's) and a short one, 64 new tokens, temperature 1, at several batch sizes and
torch thread counts, so that a change to the sampling path can be judged as a ratio on the
same machine. ``--llama-cpp`` adds llama.cpp (``llama-cpp-python``) on the same GGUF file,
when it is installed.

    python benchmarks/bench_generation.py [--texts 32] [--batch 8 16 32] [--threads 2]
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TQDM_DISABLE", "1")

import torch  # noqa: E402

from benchmark.profiles.base import SamplingParams  # noqa: E402
from benchmark.profiles.cpu import CpuProfile  # noqa: E402

LINE = "I went to the market this morning and bought some bread, then we talked about films."


def prompts(n: int, words: int) -> list[str]:
    text = " ".join([LINE] * (words // len(LINE.split()) + 1)).split()[:words]
    return [f"Example {i}: " + " ".join(text) for i in range(n)]


def measure(generator, batch: int, n: int, words: int, new_tokens: int) -> tuple[float, float]:
    generator.batch_size = batch
    params = SamplingParams(max_new_tokens=new_tokens, temperature=1.0, top_p=1.0, seed=0)
    began = time.perf_counter()
    texts = generator.generate(prompts(n, words), params, chat=False)
    seconds = time.perf_counter() - began
    tokens = sum(len(generator.tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts)
    return tokens / seconds, n / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=32, help="texts per measurement")
    parser.add_argument("--batch", type=int, nargs="+", default=[8, 16, 32])
    parser.add_argument("--threads", type=int, nargs="+", default=[torch.get_num_threads()])
    parser.add_argument("--new-tokens", type=int, default=64)
    args = parser.parse_args()
    generator = CpuProfile().generator()
    generate = generator.generate
    generate(prompts(2, 20), SamplingParams(8, 1.0, 1.0, 0), chat=False)  # warm-up
    print("| prompt | threads | batch | tokens/s | texts/s | s per 1,000 texts |")
    print("|---|---|---|---|---|---|")
    for words, label in ((180, "3-shot (~240 tok)"), (20, "short (~25 tok)")):
        for threads in args.threads:
            torch.set_num_threads(threads)
            for batch in args.batch:
                tps, texts = measure(generator, batch, args.texts, words, args.new_tokens)
                print(
                    f"| {label} | {threads} | {batch} | {tps:.0f} | {texts:.2f} "
                    f"| {1000 / texts:.0f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
