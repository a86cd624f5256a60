"""Where a GPU run's models sit: no tensor built on the CPU meets a policy on another
device, no policy is moved off its device to be sampled, and describing a method builds no
profile (a describe process has no GPU to build one on).

No GPU here: a module on PyTorch's ``meta`` device stands for one on a GPU (it is not the
CPU, and an operation mixing it with a CPU tensor fails as one mixing cuda:0 and cpu
does), and fakes record what the code under test hands on.
"""

import socket

import torch
from test_eval_support import TinyLM, train_tokenizer

from benchmark import preference_training
from benchmark.evaluation import win_rate
from benchmark.protocol import wire
from benchmark.untrusted import method_process


def test_reference_margins_are_computed_against_zeros_on_the_policys_device(monkeypatch):
    seen = []

    def margins(model, chosen, rejected, reference):
        seen.append(reference.device)
        return torch.zeros(len(chosen))

    monkeypatch.setattr(preference_training, "dpo_margins", margins)
    policy = torch.nn.Linear(2, 2, device="meta")
    pairs = [([1, 2, 3], 1)] * 5
    out = preference_training.reference_margins(policy, pairs, pairs, batch_size=2)
    assert out.shape == (5,)
    assert [device.type for device in seen] == ["meta"] * 3


def test_the_win_rate_samples_the_policy_where_it_is(monkeypatch):
    made = []

    class Recorder:
        def __init__(self, model, tokenizer, name, device="cpu"):
            made.append(device)

        def generate(self, prompts, params):
            return ["answer"] * len(prompts)

    class Context:
        def policy(self, artifact):
            return torch.nn.Linear(2, 2, device="meta"), None

    class Release:
        kind = "preferences"

    monkeypatch.setattr(win_rate, "HFGenerator", Recorder)
    metric = win_rate.WinRate(max_new_tokens=4)
    assert metric._answers(Release(), Context(), ["a", "b"]) == ["answer", "answer"]
    assert made == ["meta"]  # the default would move a GPU policy to the CPU in place


def test_a_method_is_described_without_building_its_profile(monkeypatch):
    def no_profile(init, blobs):
        raise AssertionError("describe built the profile")

    monkeypatch.setattr(method_process, "_profile", no_profile)
    ours, theirs = socket.socketpair()
    init = {"op": "describe", "method": "public_only", "imports": ["methods"], "plugin": None}
    init |= {"profile": "gpu", "params": {}}
    with ours, theirs, ours.makefile("rwb") as sent, theirs.makefile("rwb") as received:
        method_process._serve(init, [], sent)
        sent.flush()
        answer, _ = wire.recv(received)
    assert answer["done"] and answer["role"] == "bound"
    assert answer["config"] == method_process._load_method(init).resolve_config("gpu", {})


def test_an_ondevice_lms_models_are_built_where_it_lives():
    """A GPU profile's on-device LMs live on its accelerator: the public start, the
    downstream fits and the DP-FL clients' steps then run there (the structure tests' fake
    CUDA checks each optimiser's weights were moved; here `meta` stands for the GPU)."""
    lm = TinyLM(train_tokenizer(["a small text", "another one"]))
    lm.device = "meta"
    model = lm.new_model(0)
    assert {p.device.type for p in model.parameters()} == {"meta"} and not model.training
    # built on the CPU first, so the device never changes a seed's weights
    assert torch.equal(TinyLM(lm.tokenizer).new_model(0).transformer.wte.weight,
                       TinyLM(lm.tokenizer).build(0).transformer.wte.weight)  # fmt: skip


def test_a_method_process_sees_its_profiles_device_and_training_memory(monkeypatch):
    """The method process sees the profile through DeclaredProfile: it passed on neither,
    so a GPU run's methods built their LMs on the CPU and PE+SFT fitted the 8B generator's
    paper batch whole, without the paper profile's micro-batches and checkpointing."""
    from benchmark.profiles.base import TrainingMemory
    from benchmark.profiles.declared import DeclaredProfile
    from benchmark.profiles.paper import PaperProfile

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    paper = PaperProfile()
    seen = DeclaredProfile(paper, ("generator",), "pe_sft")
    assert seen.lm_device() == "cuda"
    assert seen.training_memory() == paper.training_memory() != TrainingMemory()
