"""Paper 002's in-vocabulary accuracy and its conversion to the public LLM's tokens."""

import pytest
import torch

from benchmark.artifact import Artifact
from benchmark.data import FederatedSplit
from benchmark.evaluation.base import EvalContext, artifact_key
from benchmark.evaluation.downstream import DownstreamConfig, DownstreamResult, evaluate_lm
from benchmark.evaluation.in_vocab import InVocabAccuracy
from benchmark.profiles import get_profile
from benchmark.profiles.word_tokenizer import build_word_tokenizer, word_token_lengths

PUBLIC = ["the cat sat", "the cat ran", "a dog sat"]
TEST = ["the the cat cat zebra zebra", "dog dog sat", "aaa aaa aaa"]


class RepeatPrevious(torch.nn.Module):
    """Predicts that the next token repeats the current one."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.vocab = vocab
        self.weight = torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids, attention_mask=None):
        logits = torch.nn.functional.one_hot(input_ids, self.vocab).float()
        return type("Out", (), {"logits": logits})()


def context_with(tokenizer, artifact):
    split = FederatedSplit(
        "toy",
        {"version": "v"},
        {"public": [{"text": t} for t in PUBLIC], "test": [{"text": t} for t in TEST]},
    )
    ctx = EvalContext(split=split, profile=get_profile("tiny"), downstream=DownstreamConfig())
    model = RepeatPrevious(len(tokenizer))
    ctx._trained[artifact_key(artifact)] = DownstreamResult(model, tokenizer, {}, 0, {})
    return ctx


def test_oov_targets_are_left_out_and_words_count_in_llm_tokens():
    words = build_word_tokenizer(PUBLIC, 8)  # 3 specials + the, cat, sat, a, dog: no zebra
    artifact = Artifact("model", model_dir="m", tokenizer="word_unigram:100")
    out = InVocabAccuracy().compute(artifact, context_with(words, artifact))
    # text 1 targets: the(✓) cat(✗) cat(✓) zebra=OOV(left out) zebra=OOV(left out)
    # text 2 targets: dog(✓) sat(✗); text 3: aaa aaa, OOV (left out)
    assert out["top1_in_vocab"] == pytest.approx(3 / 5)
    llm = get_profile("tiny").public_llm().tokenizer
    length = dict(zip(["the", "cat", "zebra", "dog", "sat"], word_token_lengths(
        ["the", "cat", "zebra", "dog", "sat"], llm
    ), strict=True))  # fmt: skip
    correct = length["the"] + length["cat"] + length["dog"]
    aaa = word_token_lengths(["aaa"], llm)[0]
    total = (
        length["the"] + 2 * length["cat"] + 2 * length["zebra"] + length["dog"] + length["sat"]
    ) + 2 * aaa
    assert out["top1_llm_tokens"] == pytest.approx(correct / total)


def test_a_model_on_the_llm_vocabulary_has_no_oov():
    llm = get_profile("tiny").public_llm().tokenizer
    artifact = Artifact("model", model_dir="m", tokenizer="public_llm")
    ctx = context_with(llm, artifact)
    out = InVocabAccuracy().compute(artifact, ctx)
    model = ctx.downstream_result(artifact).model
    top1 = evaluate_lm(model, llm, TEST, 64)["top1"]
    assert out["top1_in_vocab"] == out["top1_llm_tokens"] == pytest.approx(top1)
