"""The preference track: SFT + DPO of the downstream policy, and the metrics that read it."""

import hashlib
import random
import types

import numpy as np
import pytest
import torch

from benchmark.artifact import Artifact
from benchmark.data import FederatedSplit
from benchmark.evaluation.base import EvalContext, evaluate
from benchmark.evaluation.downstream import DownstreamConfig
from benchmark.preference_training import (
    AlignmentConfig,
    align,
    completion_logprobs,
    encode_completions,
    encode_pairs,
    reference_margins,
)
from benchmark.profiles import get_profile

WORDS = [
    "apple",
    "river",
    "stone",
    "cloud",
    "green",
    "seven",
    "window",
    "quiet",
    "paper",
    "lamp",
    "horse",
    "bread",
]
FAST = {
    "sft_epochs": 2,
    "sft_lr": 2e-3,
    "dpo_epochs": 4,
    "dpo_lr": 2e-3,
    "batch_size": 8,
    "max_completion_tokens": 12,
}


def tuples(n: int, seed: int) -> list[dict[str, str]]:
    """Distinct (prompt, chosen, rejected) tuples of random words."""
    rng = random.Random(seed)

    def words(k: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(k))

    return [
        {
            "prompt": f"\n\nHuman: {words(4)}\n\nAssistant: ",
            "chosen": words(6),
            "rejected": words(6),
            "client_id": f"u{seed}-{i}",
            "text": "",
        }
        for i in range(n)
    ]


def make_split() -> FederatedSplit:
    parts = {"train": tuples(24, 1), "validation": [], "test": tuples(24, 2), "public": []}
    return FederatedSplit("prefs", {"version": "v-test"}, parts)


def context(tmp_path, alignment=None) -> EvalContext:
    downstream = DownstreamConfig(alignment=alignment or FAST)
    return EvalContext(
        make_split(), get_profile("tiny"), seed=0, work_dir=tmp_path, downstream=downstream
    )


def test_completion_logprobs_sum_the_completion_tokens_only():
    generator = get_profile("tiny").generator()
    model, tokenizer = generator.model, generator.tokenizer
    (row,) = encode_completions(tokenizer, [("a prompt", "its completion")], 16, 512)
    ids, prompt_len = row
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0].log_softmax(-1)
        expected = sum(float(logits[t - 1, ids[t]]) for t in range(prompt_len, len(ids)))
        assert float(completion_logprobs(model, [row])[0]) == pytest.approx(expected, abs=1e-4)


def test_completion_logprobs_of_a_batch_equal_each_row_alone():
    """Logits are kept only from the batch's first completion position on: rows with other
    prompt lengths (and padding) still sum exactly their own completion tokens."""
    generator = get_profile("tiny").generator()
    pairs = [("a prompt", "its completion"), ("a much longer prompt than that", "ok"), ("", "x y")]
    rows = encode_completions(generator.tokenizer, pairs, 16, 512)
    with torch.no_grad():
        batched = completion_logprobs(generator.model, rows)
        alone = torch.cat([completion_logprobs(generator.model, [row]) for row in rows])
    torch.testing.assert_close(batched, alone, rtol=1e-5, atol=1e-4)


def test_reference_margins_batched_by_length_come_back_in_the_pairs_order():
    """Pairs are batched by length: each margin is still its own pair's, as computed alone."""
    generator = get_profile("tiny").generator()
    pairs = tuples(7, 3)
    for i, pair in enumerate(pairs):  # lengths out of order, so batching reorders them
        pair["chosen"] += " lamp" * ((5 * i) % 7)
    chosen, rejected = encode_pairs(generator.tokenizer, pairs, 40, 512)
    lengths = [max(len(c), len(r)) for (c, _), (r, _) in zip(chosen, rejected, strict=True)]
    assert lengths != sorted(lengths)  # batching by length takes the pairs out of order
    batched = reference_margins(generator.model, chosen, rejected, 3)
    alone = torch.cat(
        [
            reference_margins(generator.model, [c], [r], 1)
            for c, r in zip(chosen, rejected, strict=True)
        ]
    )
    assert len({len(c) for c, _ in chosen}) > 3
    torch.testing.assert_close(batched, alone, rtol=1e-5, atol=1e-4)


def test_generator_margins_are_computed_once_and_read_back(tmp_path, monkeypatch):
    from benchmark.evaluation import preference_audit

    monkeypatch.setenv("FEDSYNTH_CACHE", str(tmp_path / "cache"))
    ctx = context(tmp_path)
    records = [{k: r[k] for k in ("prompt", "chosen", "rejected")} for r in tuples(6, 3)]
    first = preference_audit.generator_margins(ctx, records, 12)
    assert len(list((tmp_path / "cache" / "generator_margins").glob("*.npy"))) == 1

    def refuse(*args, **kwargs):
        raise AssertionError("recomputed instead of read from the cache")

    monkeypatch.setattr(preference_audit, "reference_margins", refuse)
    np.testing.assert_array_equal(preference_audit.generator_margins(ctx, records, 12), first)
    with pytest.raises(AssertionError, match="recomputed"):  # other tuples: another key
        preference_audit.generator_margins(ctx, records[:3], 12)


def test_alignment_without_pairs_is_the_base_model():
    generator = get_profile("tiny").generator()
    model = align(generator.model, generator.tokenizer, [], AlignmentConfig(**FAST), 0)
    assert model is not generator.model
    for a, b in zip(model.parameters(), generator.model.parameters(), strict=True):
        assert torch.equal(a, b)


def test_the_base_model_release_scores_even(tmp_path):
    metrics = [{"name": "reward_accuracy"}, {"name": "premia"}]
    out = evaluate(Artifact("preferences", pairs=[]), context(tmp_path), metrics)["metrics"]
    per_tuple = out["reward_accuracy"].pop("per_client")["test"]
    assert out["reward_accuracy"] == {"accuracy": 0.5, "n": 24.0}
    # every test tuple kept as a tie: one hit of two
    assert per_tuple["accuracy_hits"] == [1] * 24 and per_tuple["tokens"] == [2] * 24
    assert out["premia"]["auc"] == 0.5


def test_premia_finds_the_members_of_a_release_of_private_tuples(tmp_path):
    ctx = context(tmp_path)
    leaked = [
        {k: r[k] for k in ("prompt", "chosen", "rejected")} for r in ctx.split.records("train")
    ]
    metrics = [{"name": "premia"}, {"name": "reward_accuracy"}]
    # the generator is cached per process: a method before froze it (peft) and replaced its
    # forward by a closure over the original (trl); the policy must train its own weights
    shared = get_profile("tiny").generator().model
    shared.requires_grad_(False)
    original = shared.forward

    def patched(self, *args, **kwargs):  # as trl's fused forward: a closure over the original
        return original(*args, **kwargs)

    vars(shared)["forward"] = types.MethodType(patched, shared)
    try:
        out = evaluate(Artifact("preferences", pairs=leaked), ctx, metrics)["metrics"]
    finally:
        shared.requires_grad_(True)
        del vars(shared)["forward"]
    assert out["premia"]["auc"] > 0.8  # trained on exactly the members
    generator = get_profile("tiny").generator()
    # the base generator the margins are measured against is left untouched
    assert all(not p.grad_fn for p in generator.model.parameters())
    assert 0.0 <= out["reward_accuracy"]["accuracy"] <= 1.0


def test_dpo_raises_the_chosen_over_the_rejected_on_its_pairs(tmp_path):
    ctx = context(tmp_path)
    pairs = [
        {k: r[k] for k in ("prompt", "chosen", "rejected")} for r in ctx.split.records("train")
    ]
    from benchmark.evaluation.preference_audit import implicit_margins

    margins = implicit_margins(ctx, Artifact("preferences", pairs=pairs), pairs, 12)
    assert np.mean(margins > 0) > 0.9


def test_win_rate_scores_a_preference_release_through_its_policy(tmp_path):
    spec = {"name": "win_rate", "max_new_tokens": 4, "n_prompts": 5}
    ctx = context(tmp_path)
    out = evaluate(Artifact("preferences", pairs=[]), ctx, [spec])["metrics"]["win_rate"]
    assert out["n"] == 5.0
    # the verdicts per test tuple: over every tuple of the part, 2 tokens where judged
    counts = out["per_client"]["test"]
    tuples = sorted(str(r["client_id"]) for r in ctx.split.records("test"))
    assert counts["clients_sha256"] == hashlib.sha256("\n".join(tuples).encode()).hexdigest()
    assert sorted(counts["tokens"]) == [0] * (len(tuples) - 5) + [2] * 5
    assert sum(counts["win_rate_hits"]) / sum(counts["tokens"]) == out["win_rate"]


def test_head_to_head_compares_two_releases_policies_on_the_same_prompts(tmp_path):
    other = Artifact("preferences", pairs=[])
    other.save(tmp_path / "other.json")
    spec = {
        "name": "win_rate",
        "max_new_tokens": 4,
        "n_prompts": 5,
        "against": str(tmp_path / "other.json"),
    }
    out = evaluate(Artifact("preferences", pairs=[]), context(tmp_path), [spec])
    # the same (base) policy on both sides: every answer ties
    assert out["metrics"]["win_rate"].pop("per_client")["test"]["win_rate_hits"].count(1) == 5
    assert out["metrics"]["win_rate"] == {"win_rate": 0.5, "ties": 5.0, "n": 5.0}
    assert out["settings"]["win_rate"]["against"] == str(tmp_path / "other.json")


def test_the_prefs_judge_shares_no_weights_with_the_policies_start():
    """Every cpu policy starts from SmolLM2 (``CpuProfile.preference_policy``), whose greedy
    replies maximise SmolLM2's likelihood, and DPPrefSyn embeds with MiniLM: the track's
    judge reads neither, but a shipped reward head over another encoder."""
    from benchmark.evaluation.reward_head import RewardHead
    from benchmark.profiles import mpnet
    from benchmark.profiles.cpu import EMBEDDER_LABEL, SMOLLM2
    from benchmark.profiles.shipped import shipped_file
    from leaderboard.catalog import SUITES

    (win_rate,) = [m for m in SUITES["prefs"].metrics if m["name"] == "win_rate"]
    judge = win_rate["settings"]["judge"]
    assert judge["type"] == "embedding_reward"
    head = RewardHead.load(shipped_file(f"reward_heads/{judge['head_name']}.npz"))
    assert head.meta["embedder"] == mpnet.LABEL not in (EMBEDDER_LABEL, SMOLLM2.label)
    assert "all-mpnet-base-v2" not in EMBEDDER_LABEL + SMOLLM2.label
