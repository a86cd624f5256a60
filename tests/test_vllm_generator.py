"""The vLLM generator with the fake ``vllm`` (``tests/fakes/site-packages``): fine-tuned
policies reach the engine as LoRA requests, the engine is awake only while it samples, and it
never samples weights that changed behind its back; in the method process, the generator
samples through the coordinator's engine (a sampling call over the channel)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from benchmark.profiles.base import EngineSpec, SamplingParams
from benchmark.profiles.hf_generator import HFGenerator
from benchmark.profiles.ondevice import RandomGPT2LM
from benchmark.profiles.tiny import TINY_SHAPE
from benchmark.profiles.vllm_engine import VLLMEngine
from benchmark.profiles.vllm_generator import StaleEngineError, VLLMGenerator
from methods.lora import lora_config

PARAMS = SamplingParams(max_new_tokens=4, seed=1)


@pytest.fixture
def setup(fake_vllm):
    tokenizer, model_dir, events = fake_vllm
    engine = VLLMEngine(EngineSpec(str(model_dir), None, 0.3, max_model_len=128))
    model = RandomGPT2LM(tokenizer, TINY_SHAPE).new_model(0)
    copy = HFGenerator(model, tokenizer, "tiny")
    return VLLMGenerator(engine, "tiny", tokenizer, lambda: copy, 128), events


def read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_engine_is_built_for_lora_and_sleep(setup):
    _, events = setup
    (engine,) = [e for e in read(events) if e["event"] == "vllm_llm"]
    kw = engine["kwargs"]
    assert kw["enable_lora"] and kw["enable_sleep_mode"] and kw["dtype"] == "bfloat16"
    assert kw["max_lora_rank"] >= 4 and kw["max_model_len"] == 128
    assert engine["engine_process_start"] == "spawn"  # a fork would find CUDA unusable


def test_an_adapted_policy_is_sampled_as_a_lora_request_and_only_sampling_wakes(setup):
    from peft import get_peft_model

    generator, events = setup
    assert len(generator.generate(["a b", "c"], PARAMS)) == 2  # base weights
    peft = get_peft_model(generator.model, lora_config(4, 8))
    for _ in range(2):
        with generator.adapted(peft):
            generator.generate(["a b"], PARAMS)
    peft.unload()
    log = [e for e in read(events) if e["event"] != "vllm_llm"]
    assert [e["event"] for e in log] == ["vllm_sleep"] + [
        "vllm_wake",
        "vllm_generate",
        "vllm_sleep",
    ] * 3  # built, then put to sleep; awake only for each batch
    loras = [e["lora"] for e in log if e["event"] == "vllm_generate"]
    assert loras[0] is None and loras[1]["r"] == loras[2]["r"] == 4
    assert loras[1]["id"] != loras[2]["id"]  # vLLM caches adapters by id: each is new
    assert generator.generate(["a"], PARAMS)  # the base again, no adapter


def test_a_sampling_session_wakes_the_engine_once_and_training_never_meets_it_awake(setup):
    """A release samples batch after batch (Expand): one wake and one sleep for all of
    them, not a level-1 round trip of every weight per batch. Touching the transformers
    copy inside the session (to train or score it) puts the engine to sleep first."""
    import numpy as np

    from methods.private_evolution import expand

    generator, events = setup
    expand(generator, ["a b", "c d", "e"], 3, PARAMS, 1, np.random.default_rng(0))
    with generator.sampling_session():
        with generator.sampling_session():  # nested: the outer one keeps it awake
            generator.generate(["a"], PARAMS)
        generator.generate(["b"], PARAMS)
        assert generator.model is not None  # about to be trained: the engine sleeps first
        assert read(events)[-1]["event"] == "vllm_sleep"
        generator.generate(["c"], PARAMS)
    generator.generate(["d"], PARAMS)  # outside a session: a round trip again
    log = [e["event"] for e in read(events) if e["event"] != "vllm_llm"]
    expand_part = log[1 : log.index("vllm_sleep", 1) + 1]
    assert expand_part[0] == "vllm_wake" and expand_part[-1] == "vllm_sleep"
    assert expand_part.count("vllm_wake") == 1 and expand_part.count("vllm_generate") >= 3
    assert log[len(expand_part) + 1 :] == [
        *("vllm_wake", "vllm_generate", "vllm_generate", "vllm_sleep"),  # a, b
        *("vllm_wake", "vllm_generate", "vllm_sleep"),  # c, then the session ends
        *("vllm_wake", "vllm_generate", "vllm_sleep"),  # d
    ]


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
