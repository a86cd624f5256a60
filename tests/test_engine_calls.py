"""Sampling calls: a generator in the method process samples through the coordinator's
vLLM engine (fake ``vllm``, ``tests/fakes/site-packages``), with its LoRA adapter sent as
checked fields and tensors; the coordinator refuses any other shape of call."""

from __future__ import annotations

import json
import socket
import threading

import pytest

from benchmark.isolation.engine_service import EngineService
from benchmark.privacy.errors import PrivacyError
from benchmark.profiles.base import EngineSpec, SamplingParams
from benchmark.profiles.hf_generator import HFGenerator
from benchmark.profiles.ondevice import RandomGPT2LM
from benchmark.profiles.tiny import TINY_SHAPE
from benchmark.profiles.vllm_engine import VLLMEngine
from benchmark.profiles.vllm_generator import VLLMGenerator
from benchmark.protocol import wire
from benchmark.protocol.engine_calls import (
    Adapter,
    MalformedCall,
    decode_call,
    encode_call,
    encode_rest,
    write_adapter,
)
from benchmark.untrusted.engine_proxy import EngineProxy
from methods.lora import lora_config

PARAMS = SamplingParams(max_new_tokens=4, seed=5)


class _Profile:
    """The coordinator's profile: one engine for both writers (as ``gpu`` has)."""

    def __init__(self, spec: EngineSpec) -> None:
        self.spec = spec

    def engine_spec(self, role: str) -> EngineSpec | None:
        return self.spec if role in ("generator", "preference_generator") else None


@pytest.fixture
def world(fake_vllm):
    tokenizer, model_dir, events = fake_vllm
    spec = EngineSpec(str(model_dir), None, 0.3, max_model_len=64)
    model = RandomGPT2LM(tokenizer, TINY_SHAPE).new_model(0)
    return {"spec": spec, "tokenizer": tokenizer, "model": model, "events": events}


def _remote(world, roles=("generator",)):
    """A generator whose engine is the coordinator's: a proxy over a socket pair, served
    by an :class:`EngineService` on a thread (the coordinator's side)."""
    ours, theirs = wire.stream_pair()
    service = EngineService(lambda: _Profile(world["spec"]), roles)
    served, errors = [], []

    def coordinator():
        stream = ours.makefile("rwb")
        while True:
            try:
                header, blobs = wire.recv(stream)
            except wire.ChannelClosed:
                return
            try:
                answer = service.serve(header, blobs)
            except PrivacyError as exc:
                errors.append(exc)
                ours.shutdown(socket.SHUT_RDWR)  # as the coordinator's run ends
                return
            served.append(header)
            wire.send(stream, *answer)

    threading.Thread(target=coordinator, daemon=True).start()
    copy = HFGenerator(world["model"], world["tokenizer"], "tiny")
    proxy = EngineProxy(theirs.makefile("rwb"), "generator")
    return VLLMGenerator(proxy, "tiny", world["tokenizer"], lambda: copy, 64), served, errors


def _events(world):
    return [json.loads(line) for line in world["events"].read_text().splitlines()]


def test_a_method_samples_the_coordinators_engine_with_its_adapter(world):
    from peft import get_peft_model

    remote, served, _ = _remote(world)
    local = VLLMGenerator(VLLMEngine(world["spec"]), "tiny", world["tokenizer"], None, 64)
    prompts = ["a b", "c d e"]
    assert remote.generate(prompts, PARAMS) == local.generate(prompts, PARAMS)
    peft = get_peft_model(remote.model, lora_config(4, 8))
    with remote.adapted(peft):
        texts = remote.generate(prompts, PARAMS)
    peft.unload()
    assert len(texts) == 2 and [h["adapter"] is None for h in served] == [True, False]
    loras = [e["lora"] for e in _events(world) if e["event"] == "vllm_generate"]
    assert loras[:2] == [None, None] and loras[2]["r"] == 4 and loras[2]["alpha"] == 8
    assert loras[2]["targets"] == sorted(served[1]["adapter"]["target_modules"])


def test_a_sampling_session_keeps_the_coordinators_engine_awake_until_it_ends(world):
    """Over the channel too: a session's batches share one wake, its end is a rest call
    answered once the engine sleeps, and the service can rest an engine a method left awake
    (below: before the coordinator takes the method's answer)."""
    remote, served, _ = _remote(world)
    with remote.sampling_session():
        remote.generate(["a b"], PARAMS)
        remote.generate(["c"], PARAMS)
    assert [h.get("stay_awake", "rest") for h in served] == [True, True, "rest"]
    log = [e["event"] for e in _events(world) if e["event"] != "vllm_llm"]
    assert log == ["vllm_sleep", "vllm_wake", "vllm_generate", "vllm_generate", "vllm_sleep"]
    service = EngineService(lambda: _Profile(world["spec"]), ("generator",))
    header, _ = encode_call("generator", [[1, 2]], PARAMS, None, True)
    service.serve(header, [])
    service.rest()
    assert _events(world)[-1]["event"] == "vllm_sleep"
    with pytest.raises(PrivacyError, match="no engine"):  # rests only declared roles
        service.serve(encode_rest("embedder"), [])


def test_the_coordinator_rests_its_engines_before_the_methods_answer(world):
    """A method that ends its round inside a session it never closed (``stay_awake``, no
    rest call) leaves no awake engine: the coordinator puts it to sleep before it takes the
    answer, so the evaluation (and, before a pool call, client code) has the GPU."""
    from benchmark.isolation.bounds import RequestBounds
    from benchmark.isolation.coordinator import MethodProcess

    ours, theirs = wire.stream_pair()
    process = object.__new__(MethodProcess)  # its channel and engines, without a process
    process._stream, process.bounds = ours.makefile("rwb"), RequestBounds.from_environment()
    process._engines = EngineService(lambda: _Profile(world["spec"]), ("generator",))
    method = theirs.makefile("rwb")
    header, _ = encode_call("generator", [[1, 2]], PARAMS, None, True)
    wire.send(method, header)
    wire.send(method, {"done": True})
    assert process.answer()[0] == {"done": True}
    log = [e["event"] for e in _events(world)]
    assert log[-2:] == ["vllm_generate", "vllm_sleep"]


def test_the_coordinator_serves_only_declared_engine_roles(world):
    remote, _, errors = _remote(world, roles=("embedder",))
    with pytest.raises(wire.ChannelClosed):
        remote.generate(["a"], PARAMS)
    assert "no engine" in str(errors[0])
    service = EngineService(lambda: _Profile(world["spec"]), ("preference_generator",))
    header, _ = encode_call("generator", [[1, 2]], PARAMS, None, False)  # the same engine
    assert len(service.serve(header, [])[0]["texts"]) == 1
    service = EngineService(lambda: _Profile(world["spec"]), ("generator", "embedder"))
    header, _ = encode_call("embedder", [[1, 2]], PARAMS, None, False)
    with pytest.raises(PrivacyError, match="no engine"):
        service.serve(header, [])
    header, _ = encode_call("generator", [[1] * 61], PARAMS, None, False)
    with pytest.raises(MalformedCall, match="exceed the context of 64"):
        service.serve(header, [])
    wide = Adapter(32, 8.0, ("c_attn",), False, b"")  # vLLM would fail in its own process
    header, blobs = encode_call("generator", [[1, 2]], PARAMS, wide, False)
    with pytest.raises(MalformedCall, match="exceeds the engine's max_lora_rank of 16"):
        service.serve(header, blobs)


def _call(**changes):
    header, blobs = encode_call("generator", [[1, 2]], PARAMS, None, False)
    return {**header, **changes}, blobs


ADAPTER = {"r": 4, "lora_alpha": 8, "target_modules": ["c_attn"], "use_rslora": False}


@pytest.mark.parametrize(
    ("header", "blobs"),
    [
        ({**_call()[0], "path": "/etc"}, []),  # a field of its own
        (_call(prompts=[[1, "2"]])[0], []),
        (_call(prompts=[[1, -2]])[0], []),
        (_call(prompts=[[True]])[0], []),
        (_call(prompts=[[]])[0], []),
        (_call(params=[4, 1.0, 1.0])[0], []),
        (_call(params=[4, "1", 1.0, 0])[0], []),
        (_call(params=[4, 1.0, 2.0, 0])[0], []),  # top_p above 1: SamplingParams refuses
        (_call()[0], [b"weights"]),  # weights without an adapter
        (_call(adapter=ADAPTER)[0], []),  # an adapter without weights
        (_call(adapter={**ADAPTER, "target_modules": ["../x"]})[0], [b""]),
        (_call(adapter={**ADAPTER, "r": 4.0})[0], [b""]),
        (_call(adapter={**ADAPTER, "path": "x"})[0], [b""]),
        (_call(stay_awake=1)[0], []),
        ({**encode_rest("generator"), "rest": 1}, []),
        (encode_rest("generator"), [b"x"]),
        ({**encode_rest("generator"), "prompts": [[1]]}, []),
    ],
)
def test_malformed_calls_are_refused_before_sampling(header, blobs):
    with pytest.raises(MalformedCall):
        decode_call(header, blobs)


def test_the_coordinator_writes_the_adapter_directory_from_checked_fields(tmp_path):
    import torch
    from safetensors.torch import load_file, save

    weights = save({"base_model.model.h.0.attn.c_attn.lora_A.weight": torch.ones(4, 8)})
    call = decode_call(*_call(adapter=ADAPTER)[:1], [weights])
    directory = write_adapter(call.adapter, tmp_path / "a", "base")
    assert sorted(p.name for p in directory.iterdir()) == [
        "adapter_config.json",
        "adapter_model.safetensors",
    ]
    config = json.loads((directory / "adapter_config.json").read_text())
    assert config["r"] == 4 and config["target_modules"] == ["c_attn"]
    assert config["base_model_name_or_path"] == "base" and config["bias"] == "none"
    assert list(load_file(directory / "adapter_model.safetensors")) == [
        "base_model.model.h.0.attn.c_attn.lora_A.weight"
    ]
    bad = Adapter(4, 8.0, ("c_attn",), False, b"not safetensors")
    with pytest.raises(MalformedCall, match="not safetensors"):
        write_adapter(bad, tmp_path / "b", "base")
