"""Paper 002's metric: in-vocabulary next-token accuracy, and word accuracy in LLM tokens.

§2.5: "the ratio of accurately predicted in-vocabulary words to the total number of words
in the sequence (excluding OOV tokens)". For a model on a word vocabulary
(``word_unigram:K``) that is ``top1_in_vocab``: targets that are the OOV token are left
out, and predicting the OOV token is never right (TFF's accuracy without OOV). A sub-word
vocabulary has no OOV, so there it equals ``next_token``'s top-1.

§3.1 compares word models with sub-word models by converting: each word is split with the
public LLM's tokenizer and "all tokens within a word are accurate if the predicted word is
correct". ``top1_llm_tokens`` is that converted accuracy: for a word model, correct words
weighted by their LLM-token length over all predicted words' lengths (OOV targets count,
as wrong); for a model on the public LLM's own vocabulary, plain top-1 in those tokens. It
is absent for any other vocabulary, whose units are not the LLM's.

As everywhere in the evaluator, texts are truncated to ``downstream.max_length`` tokens
and a text's first token is not predicted (nothing precedes it).
"""

from __future__ import annotations

import numpy as np
import torch

from benchmark.artifact import Artifact
from benchmark.evaluation.base import EvalContext, Metric, MetricNotApplicable
from benchmark.evaluation.downstream import _length_sorted_batches, encode, model_device, pad_right


class InVocabAccuracy(Metric):
    """Paper 002's in-vocabulary accuracy (and its LLM-token conversion) on the test part."""

    name = "in_vocab"
    kinds = ("model",)
    models = ("ondevice_lm", "public_llm")

    def compute(self, artifact: Artifact, ctx: EvalContext) -> dict[str, float]:
        from benchmark.profiles.word_tokenizer import (
            converted_token_accuracy,
            in_vocab_accuracy,
            word_pre_tokenize,
            word_token_lengths,
        )

        result = ctx.downstream_result(artifact)
        tokenizer, max_length = result.tokenizer, ctx.downstream.max_length
        texts = ctx.split.texts("test")
        word_model = (artifact.tokenizer or "").startswith("word_unigram:")
        oov = tokenizer.unk_token_id if word_model else -1  # -1: no target is OOV
        self.record(vocabulary=artifact.tokenizer or "ondevice")
        seqs = encode(tokenizer, texts, max_length)
        predicted, targets = _greedy_predictions(result.model, seqs)
        pairs = list(zip(predicted, targets, strict=True))
        counts = np.array([in_vocab_accuracy(p, t, oov, ()) for p, t in pairs]).sum(axis=0)
        if counts[1] == 0:
            raise MetricNotApplicable("in_vocab: no in-vocabulary target token in the test part")
        out = {"top1_in_vocab": counts[0] / counts[1]}
        if word_model:
            llm = ctx.profile.public_llm().tokenizer
            converted = np.array([
                converted_token_accuracy(
                    p, t, word_token_lengths(word_pre_tokenize(text)[1 : len(t) + 1], llm), oov, ()
                )
                for (p, t), text in zip(pairs, texts, strict=True)
            ]).sum(axis=0)  # fmt: skip
            out["top1_llm_tokens"] = converted[0] / converted[1]
        elif artifact.tokenizer == "public_llm":
            out["top1_llm_tokens"] = out["top1_in_vocab"]
        return {k: float(v) for k, v in out.items()}


def _greedy_predictions(
    model: object, seqs: list[list[int]], batch_size: int = 16
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per sequence: the model's argmax next-token ids and the true next tokens."""
    predicted = [np.zeros(0, dtype=np.int64)] * len(seqs)
    targets = [np.asarray(s[1:], dtype=np.int64) for s in seqs]
    usable = [i for i, s in enumerate(seqs) if len(s) >= 2]
    device = model_device(model)
    model.eval()
    with torch.inference_mode():
        for local in _length_sorted_batches([seqs[i] for i in usable], batch_size):
            rows = [usable[i] for i in local]
            ids, mask = pad_right([seqs[i] for i in rows], device)
            argmax = model(input_ids=ids, attention_mask=mask).logits[:, :-1].argmax(-1).cpu()
            for j, row in enumerate(rows):
                predicted[row] = argmax[j, : len(seqs[row]) - 1].numpy()
    return predicted, targets
