"""The vLLM generator with the fake ``vllm`` (``tests/fakes/site-packages``): fine-tuned
policies reach the engine as LoRA requests, the engine sleeps while the transformers copy
trains and wakes to sample, and it never samples weights that changed behind its back."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from benchmark.profiles.base import SamplingParams
from benchmark.profiles.hf_generator import HFGenerator
from benchmark.profiles.ondevice import RandomGPT2LM
from benchmark.profiles.tiny import TINY_SHAPE
from benchmark.profiles.tokenizer_builders import tiny_tokenizer
from benchmark.profiles.vllm_generator import StaleEngineError, VLLMGenerator, vllm_engine
from methods.lora import lora_config

FAKES = Path(__file__).parent / "fakes" / "site-packages"
PARAMS = SamplingParams(max_new_tokens=4, seed=1)


@pytest.fixture
def setup(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(FAKES))
    monkeypatch.setenv("FEDSYNTH_FAKE_EVENTS", str(tmp_path / "events.jsonl"))
    tokenizer = tiny_tokenizer()
    tokenizer.save_pretrained(tmp_path / "model")
    llm = vllm_engine(
        str(tmp_path / "model"), revision=None, gpu_memory_utilization=0.3, max_model_len=128
    )
    model = RandomGPT2LM(tokenizer, TINY_SHAPE).new_model(0)
    generator = VLLMGenerator(llm, "tiny", lambda: HFGenerator(model, tokenizer, "tiny"), 128)
    yield generator, tmp_path / "events.jsonl"
    for name in [n for n in sys.modules if n == "vllm" or n.startswith("vllm.")]:
        del sys.modules[name]


def read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_engine_is_built_for_lora_and_sleep(setup):
    _, events = setup
    (engine,) = [e for e in read(events) if e["event"] == "vllm_llm"]
    kw = engine["kwargs"]
    assert kw["enable_lora"] and kw["enable_sleep_mode"] and kw["dtype"] == "bfloat16"
    assert kw["max_lora_rank"] >= 4 and kw["max_model_len"] == 128


def test_an_adapted_policy_is_sampled_as_a_lora_request_and_training_sleeps(setup):
    from peft import get_peft_model

    generator, events = setup
    assert len(generator.generate(["a b", "c"], PARAMS)) == 2  # base weights, awake
    base = generator.model  # training starts: the engine sleeps
    peft = get_peft_model(base, lora_config(4, 8))
    for _ in range(2):
        with generator.adapted(peft):
            generator.generate(["a b"], PARAMS)
    peft.unload()
    log = [e for e in read(events) if e["event"] != "vllm_llm"]
    assert [e["event"] for e in log] == [
        "vllm_generate", "vllm_sleep", "vllm_wake", "vllm_generate", "vllm_sleep",
        "vllm_wake", "vllm_generate", "vllm_sleep",
    ]  # fmt: skip
    loras = [e["lora"] for e in log if e["event"] == "vllm_generate"]
    assert loras[0] is None and loras[1]["r"] == loras[2]["r"] == 4
    assert loras[1]["id"] != loras[2]["id"]  # vLLM caches adapters by id: each is new
    assert generator.generate(["a"], PARAMS)  # the base again, no adapter


def test_weights_changed_in_place_are_never_sampled(setup):
    generator, _ = setup
    with torch.no_grad():
        next(generator.model.parameters()).add_(1.0)  # a full fine-tune in place
    with pytest.raises(StaleEngineError, match="changed in place"):
        generator.generate(["a"], PARAMS)
    with (
        pytest.raises(StaleEngineError, match="only as a LoRA adapter"),
        generator.adapted(generator.model),
    ):
        pass


def test_prompts_are_cut_to_the_context(setup):
    generator, events = setup
    generator.generate(["word " * 400], SamplingParams(max_new_tokens=8, seed=0))
    assert [e for e in read(events) if e["event"] == "vllm_generate"]
    with pytest.raises(ValueError, match="leaves no room"):
        generator.generate(["a"], SamplingParams(max_new_tokens=128))
