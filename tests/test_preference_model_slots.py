"""The preference track runs on its own model slots (paper 003's ψ, candidate writer and
downstream policy), so the ``paper`` profile can run bge-large, Llama-2-7b-chat and
Pythia-2.8B there while the other tracks keep its generator and embedder."""

import pytest
from doubles import SEEDED
from model_methods_support import make_preference_split

from benchmark.profiles.base import Generator
from benchmark.profiles.hf_generator import HFGenerator
from benchmark.profiles.tiny import TinyProfile
from benchmark.runner import run
from benchmark.spec import spec_from_dict

SLOTS = ("preference_embedder", "preference_generator", "preference_policy")
WRITER_ID = "meta-llama/Llama-2-7b-chat-hf"  # as `paper` names its writer
ALIGNMENT = {"sft_epochs": 1, "dpo_epochs": 1, "batch_size": 8, "max_completion_tokens": 8}


class Writer(Generator):
    """A candidate writer apart from the policy: fixed replies, and no model to train."""

    name = "writer"

    def generate(self, prompts, params, chat=True):
        return [f"written reply {i}" for i in range(len(prompts))]

    def logprobs(self, prompts, completions, chat=True):
        raise AssertionError("the candidate writer was scored as the policy")


class Policy(HFGenerator):
    """The downstream policy: trained and scored, never asked to write candidates."""

    def generate(self, prompts, params, chat=True):
        raise AssertionError("the policy was asked to write the candidates")


class PreferenceSlotsProfile(TinyProfile):
    """``tiny``, but the preference track may not touch its generator or embedder, and its
    writer and policy are different objects; each slot records its use."""

    def __init__(self) -> None:
        self.used: set[str] = set()
        base = TinyProfile.generator(self)
        self.writer = Writer()
        self.policy = Policy(base.model, base.tokenizer, "policy")

    def generator(self):
        raise AssertionError("the preference track read the profile's generator")

    def embedder(self):
        raise AssertionError("the preference track read the profile's embedder")

    def preference_embedder(self):
        self.used.add("preference_embedder")
        return TinyProfile.embedder(self)

    def preference_generator(self):
        self.used.add("preference_generator")
        return self.writer

    def preference_policy(self):
        self.used.add("preference_policy")
        return self.policy

    def describe(self) -> dict[str, str]:
        return {**TinyProfile.describe(self), "preference_generator": WRITER_ID}


def run_on_slots(tmp_path, method: str, params: dict) -> set[str]:
    """Run ``method`` through the runner (in process: the profile object is the one used)
    with the policy metrics only (the win-rate judges read the generator, by design)."""
    spec = spec_from_dict(
        {
            "split": {"path": "unused"},
            "method": {"name": method, "params": params},
            "privacy": {
                "epsilon": 4.0,
                "delta": 1e-4,
                "unit": "sample",
                "accountant": "prv",
                **SEEDED,  # a secret draw of sizes that drops every cluster: no pairs (~1e-4)
            },
            "evaluation": {
                "metrics": [{"name": "reward_accuracy", "settings": {"n": 16}}],
                "downstream": {"alignment": ALIGNMENT},
            },
            "profile": "tiny",
            "seed": 0,
        }
    )
    profile = PreferenceSlotsProfile()
    split = make_preference_split(48)
    split.parts["test"] = split.records("train")[:16]
    result = run(spec, runs_root=tmp_path / "runs", profile=profile, split=split)
    assert result.record["metrics"]["reward_accuracy.n"] == 16
    checked = result.record["contamination"]["model"].lower()
    if result.artifact.kind == "preferences":  # ranked from the writer's candidates
        pairs = result.artifact.pairs
        assert pairs and all(p["chosen"].startswith("written reply") for p in pairs)
        assert "llama-2-7b-chat" in checked  # the record checks the model that wrote them
    else:
        assert "llama" not in checked
    return profile.used


@pytest.mark.parametrize(
    ("method", "params", "slots"),
    [
        ("dpprefsyn", {"gap": 0.0}, set(SLOTS)),  # ψ, the writer; its pairs align the policy
        ("dp_ft", {}, {"preference_policy"}),  # fine-tunes and releases the policy
    ],
)
def test_preference_methods_and_their_evaluation_use_the_preference_slots(
    tmp_path, monkeypatch, method, params, slots
):
    monkeypatch.setenv("FEDSYNTH_CACHE", str(tmp_path / "cache"))  # margins computed afresh
    assert run_on_slots(tmp_path, method, params) == slots


def test_by_default_the_slots_are_the_generator_and_the_embedder():
    profile = TinyProfile()
    assert profile.preference_embedder() is profile.embedder()
    assert profile.preference_generator() is profile.generator()
    assert profile.preference_policy() is profile.generator()


def test_the_trusted_side_builds_the_preference_slots_caches():
    """A sandboxed method process reads model caches but never writes them, so the harness
    builds the slots a method declares before it starts (on ``paper``: bge-large,
    Llama-2-7b-chat, Pythia)."""
    calls: list[str] = []

    class Counting(TinyProfile):
        pass

    for slot in SLOTS:
        setattr(Counting, slot, lambda self, slot=slot: calls.append(slot))
    Counting().build_caches(SLOTS)
    assert sorted(calls) == sorted(SLOTS)
