"""DP-FT (paper 003's baseline): per-pair clipping of the DPO loss, the halves, the release."""

import math

import numpy as np
import pytest
import torch
from model_methods_support import finish, make_context, make_preference_split, run_rounds

from benchmark.federation.local_dp_sgd import DPSGDSteps, train_locally
from benchmark.federation.preference_dp_sgd import dpo_examples, dpo_pair_loss
from benchmark.privacy.accountants import epsilon, epsilon_from_ledger
from benchmark.privacy.ledger import NONPRIVATE, SUBSAMPLED_GAUSSIAN
from benchmark.profiles import get_profile
from methods.dp_ft import DPFT

PAIRS = [
    {"prompt": "\n\nHuman: a question\n\nAssistant: ", "chosen": "a kind reply", "rejected": "no"},
    {"prompt": "\n\nHuman: another one\n\nAssistant: ", "chosen": "yes, gladly", "rejected": "go"},
    {"prompt": "\n\nHuman: third\n\nAssistant: ", "chosen": "here it is", "rejected": "later"},
]


def response_logprob(model, tokenizer, prompt, response):
    """log π(response | prompt), written out token by token (the test's own reference)."""
    p = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    r = tokenizer(response, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    ids = torch.tensor([p + r])
    logp = model(input_ids=ids).logits[0].log_softmax(-1)
    return sum(logp[len(p) + j - 1, t] for j, t in enumerate(r))


def test_dpo_gradients_are_clipped_per_pair_as_a_reference_computes_them():
    generator = get_profile("tiny").generator()
    model, tokenizer = generator.model, generator.tokenizer
    torch.manual_seed(0)
    config = model.config.to_dict() | {"resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}
    policy = type(model)(type(model.config).from_dict(config))  # no dropout: deterministic
    policy.load_state_dict(model.state_dict())
    with torch.no_grad():
        for param in policy.parameters():
            param.add_(0.05 * torch.randn_like(param))
    examples = dpo_examples(model, tokenizer, PAIRS, 16, 512)
    clip, beta, lr = 0.01, 0.1, 1.0
    expected = {k: v.detach().clone() for k, v in policy.named_parameters()}
    total = {k: torch.zeros_like(v) for k, v in expected.items()}
    for pair in PAIRS:
        ref = [
            response_logprob(model, tokenizer, pair["prompt"], pair[k]).detach()
            for k in ("chosen", "rejected")
        ]
        mine = [
            response_logprob(policy, tokenizer, pair["prompt"], pair[k])
            for k in ("chosen", "rejected")
        ]
        loss = -torch.nn.functional.logsigmoid(beta * ((mine[0] - mine[1]) - (ref[0] - ref[1])))
        names, params = zip(*policy.named_parameters(), strict=True)
        grads = torch.autograd.grad(loss, params, allow_unused=True)
        grads = [
            g if g is not None else torch.zeros_like(p) for g, p in zip(grads, params, strict=True)
        ]
        norm = math.sqrt(sum(float(g.double().pow(2).sum()) for g in grads))
        assert norm > clip  # the clip binds, so scaling per pair matters
        for name, g in zip(names, grads, strict=True):
            total[name] += g * min(1.0, clip / norm)
    for name in expected:
        expected[name] -= lr * total[name] / len(PAIRS)
    # the harness: one step, everyone sampled, noise negligible (but clipping on)
    steps = DPSGDSteps(
        noise_multiplier=1e-12,
        clip_norm=clip,
        sample_rate=1.0,
        batch_size=float(len(PAIRS)),
        steps=1,
        lr=lr,
    )
    train_locally(policy, examples, steps, np.random.default_rng(0), loss=dpo_pair_loss(beta))
    for name, param in policy.named_parameters():
        torch.testing.assert_close(param.detach(), expected[name], rtol=1e-4, atol=1e-6)


def run(tmp_path, epsilon_budget):
    ctx = make_context(
        tmp_path,
        epsilon=epsilon_budget,
        split=make_preference_split(40),
        unit="sample",
        delta=1e-3,
        accountant="prv",
    )
    method = DPFT(DPFT.resolve_config("tiny", {}))
    state = run_rounds(method, ctx)
    return ctx, finish(method, ctx, state)


def test_sft_and_dpo_run_on_disjoint_halves_each_at_the_full_budget(tmp_path):
    ctx, artifact = run(tmp_path, 2.0)
    releases = ctx.pool.ledger.releases
    assert [(r.mechanism, r.label, r.partition, r.part) for r in releases] == [
        (SUBSAMPLED_GAUSSIAN, "dp_ft/sft", "halves", 0),
        (SUBSAMPLED_GAUSSIAN, "dp_ft/dpo", "halves", 1),
    ]
    each = [epsilon(r.noise_multiplier, r.sample_rate, r.count, 1e-3, "prv") for r in releases]
    assert epsilon_from_ledger(releases, 1e-3, "prv") == pytest.approx(max(each))
    assert max(each) == pytest.approx(2.0, abs=0.01)
    assert artifact.kind == "model"


def test_the_nonprivate_variant_trains_without_noise(tmp_path):
    ctx, artifact = run(tmp_path, math.inf)
    assert {r.mechanism for r in ctx.pool.ledger.releases} == {NONPRIVATE}
    assert artifact.model_dir
