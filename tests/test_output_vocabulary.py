"""A generator restricted to an output vocabulary (``HFGenerator(output_ids=...)``, the
``cpu-gemma`` profile's ids of public text): its logits are the full head's rows of those
ids, its span filler's fills come only from them, and records say so (its samples:
``tests/test_gemma_generator.py``)."""

import numpy as np
import pytest
import torch
from transformers import Gemma3ForCausalLM, Gemma3TextConfig

from benchmark.profiles.base import SamplingParams
from benchmark.profiles.cpu import GEMMA, SMOLLM2, CpuGemmaProfile, CpuProfile, public_output_ids
from benchmark.profiles.fillers import CausalSpanFiller
from benchmark.profiles.hf_generator import HFGenerator, native_bf16
from benchmark.profiles.public_corpus import public_corpus
from benchmark.profiles.tiny import TinyProfile

SIZES = {"vocab_size": 512, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2}
HEADS = {"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8}
OUTPUT_IDS = list(range(0, 512, 3))  # a third of the vocabulary


def toy_generators() -> tuple[HFGenerator, HFGenerator]:
    """The same toy Gemma 3 sampling its whole vocabulary, and restricted to OUTPUT_IDS."""
    torch.manual_seed(0)
    model = Gemma3ForCausalLM(Gemma3TextConfig(**SIZES, **HEADS)).eval()
    tokenizer = TinyProfile().generator().tokenizer  # ids below 512 in these prompts
    full = HFGenerator(model, tokenizer, "toy", batch_size=4)
    return full, HFGenerator(model, tokenizer, "toy", batch_size=4, output_ids=OUTPUT_IDS)


def test_restricted_logits_are_the_full_heads_rows_of_the_output_ids():
    full, restricted = toy_generators()
    ids = torch.tensor([[5, 17, 42, 99], [7, 8, 9, 10]])
    with torch.no_grad():
        every, _ = full._step(None, input_ids=ids)
        some, _ = restricted._step(restricted.output_head(), input_ids=ids)
    assert restricted.output_ids.tolist() == sorted({*OUTPUT_IDS, *full._end_ids().tolist()})
    torch.testing.assert_close(some, every[:, restricted.output_ids], rtol=1e-4, atol=1e-5)


def test_the_span_filler_fills_from_the_output_ids_and_never_a_banned_one():
    _, restricted = toy_generators()
    filler = CausalSpanFiller(restricted, instruction="Fill [MASK]:")
    ids = restricted.tokenizer("a stone in the garden by the old wall")["input_ids"]
    mask = np.ones(len(ids), dtype=bool)
    with torch.no_grad():
        (new,) = filler._fill_batch([ids], [mask])
    assert set(new) <= set(restricted.output_ids.tolist()) - set(filler._banned())


def test_cpu_gemma_samples_the_ids_of_public_text_and_its_records_say_so():
    tokenizer = TinyProfile().generator().tokenizer
    ids = public_output_ids(tokenizer, ["zqx lol"])
    first = tokenizer(public_corpus()[0])["input_ids"]
    assert ids == sorted(set(ids)) and set(first) <= set(ids)
    assert set(tokenizer("zqx lol")["input_ids"]) <= set(ids)
    assert GEMMA.public_vocabulary and not SMOLLM2.public_vocabulary
    described = CpuGemmaProfile().describe()["generator"]
    assert "popquotes==1.5" in described and "the split's public part" in described
    assert CpuProfile().describe()["generator"] == SMOLLM2.label


def test_the_coordinator_builds_cpu_gemmas_caches_with_the_splits_public_texts(monkeypatch):
    from doubles import make_split

    import benchmark.isolation.coordinator as coordinator
    import benchmark.profiles.cpu as cpu_profile
    from benchmark.isolation.coordinator import IsolatedLaunch
    from benchmark.spec import spec_from_dict

    built = []
    monkeypatch.setattr(cpu_profile, "_hf_generator", lambda w, texts=(): built.append(texts))
    monkeypatch.setattr(coordinator, "_WARM_ROLES", set())
    split = make_split()
    split.parts["public"] = [{"text": "a public text", "client_id": "p0"}]
    spec = spec_from_dict({
        "split": {"path": "unused"}, "method": {"name": "generator_only"},
        "privacy": {"epsilon": 0.0, "delta": 1e-5}, "profile": "cpu-gemma",
    })  # fmt: skip
    launch = IsolatedLaunch(spec, split, None, None)
    launch.models = ("generator",)
    launch._build_profile_caches()
    assert built == [["a public text"]]


def test_a_built_cpu_gemma_generator_refuses_another_splits_public_texts(monkeypatch):
    import benchmark.profiles.cpu as cpu_profile

    monkeypatch.setattr(cpu_profile, "_hf_generator", lambda w, texts=(): object())
    profile = CpuGemmaProfile()
    profile.bind_public(["a"])
    profile.generator()
    profile.bind_public(["a"])  # the same split again: nothing changes
    with pytest.raises(RuntimeError, match="another split's public ids"):
        profile.bind_public(["b"])


def test_under_bf16_autocast_the_head_is_cast_once_and_samples_what_a_cast_per_step_samples():
    if not native_bf16():
        pytest.skip("bf16 autocast sampling runs only where the CPU has native bf16")
    full, _ = toy_generators()
    fast = HFGenerator(
        full.model, full.tokenizer, "toy", 4, fast_sampling=True, output_ids=OUTPUT_IDS
    )
    assert fast.output_head().dtype == torch.bfloat16
    prompts = ["the river", "a stone in the garden by the old wall", "music"]
    params = SamplingParams(max_new_tokens=12, temperature=1.0, top_p=0.9, seed=5)
    once = fast.generate(prompts, params, chat=False)
    rows = full.model.get_output_embeddings().weight[fast.output_ids]  # fp32: cast every step
    fast.output_head = lambda: rows
    assert fast.generate(prompts, params, chat=False) == once
