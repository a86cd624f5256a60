"""POPri on the tiny profile: harness noise in the preference pairs, DPO, accounting, release."""

import io
import math

import numpy as np
import pytest
import torch
from model_methods_support import finish, make_context, run_rounds, torch_threads
from peft import set_peft_model_state_dict

from benchmark.privacy.accountants import epsilon, epsilon_from_ledger
from benchmark.privacy.ledger import SUBSAMPLED_GAUSSIAN
from methods.popri import (
    POPri,
    POPriConfig,
    adapter_weights,
    lora_policy,
    preference_pairs,
    private_scores,
    train_dpo,
)
from methods.private_evolution import few_shot_prompt

# 5 prompts x 4 candidates; the toy clients write "In the <topic> the people of house <i> sing
# song number <j>.", so candidates share more or fewer words with them.
TOPICS = ("river", "garden", "market", "library", "train")
CANDIDATES = [
    [
        f"In the {t} the people of house {k} sing song number {k}.",
        f"The people in the {t} sing.",
        f"A {t} of stone and glass.",
        "Green ideas sleep furiously.",
    ]
    for k, t in enumerate(TOPICS)
]
PROMPTS = [few_shot_prompt([f"example {k}", "another", "third"]) for k in range(len(TOPICS))]
SAMPLES = [s for group in CANDIDATES for s in group]
REJECTED_RANK = 3


def snapshot(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def pairs_through_pool(tmp_path, eps, pool_seed):
    """One POPri release of the fixed candidates' scores and the pairs it yields."""
    ctx = make_context(tmp_path, epsilon=eps, pool_seed=pool_seed)
    sigma = ctx.noise_for(steps=1)
    embeddings = ctx.profile.embedder().embed(SAMPLES)
    scores = private_scores(ctx, embeddings, sigma, 1.0, round_index=0)
    return preference_pairs(PROMPTS, SAMPLES, scores, REJECTED_RANK), scores, sigma


def test_pairs_follow_the_harness_noise(tmp_path):
    exact_pairs, exact, sigma = pairs_through_pool(tmp_path, math.inf, 0)
    assert sigma == 0.0
    # the noise-free ranking is strict with wide margins, so only noise can change it
    gaps = -np.diff(np.sort(exact.reshape(len(PROMPTS), -1), axis=1)[:, ::-1], axis=1)
    assert gaps.min() > 0.05

    small = [pairs_through_pool(tmp_path, 1.0, seed) for seed in range(4)]
    assert all(s[2] > 3.0 for s in small)  # ε = 1 for one release: σ ≈ 4
    assert len({str(p) for p, _, _ in small}) > 1  # a different noise seed, different pairs
    assert any(p != exact_pairs for p, _, _ in small)

    large = [pairs_through_pool(tmp_path, 1000.0, seed) for seed in range(4)]
    assert all(6 * s[2] < gaps.min() / 2 for s in large)  # σ ≈ 0.025: 6σ below half a gap
    assert all(p == exact_pairs for p, _, _ in large)


def test_ledger_epsilon_is_the_accountants_for_full_participation(tmp_path):
    eps, delta, rounds = 2.0, 1e-5, 3
    ctx = make_context(tmp_path, epsilon=eps, delta=delta)
    sigma = ctx.noise_for(steps=rounds, sample_rate=1.0)
    embeddings = ctx.profile.embedder().embed(SAMPLES)
    for r in range(rounds):
        private_scores(ctx, embeddings, sigma, 1.0, round_index=r)
    releases = ctx.pool.ledger.releases
    assert [(r.sampling, r.sample_rate, r.sensitivity, r.dim) for r in releases] == [
        ("full", 1.0, 1.0, len(SAMPLES))
    ] * rounds
    spent = epsilon_from_ledger(releases, delta)
    assert spent == pytest.approx(epsilon(sigma, 1.0, rounds, delta))
    assert 0.99 * eps < spent <= eps


def test_dpo_prefers_the_chosen_samples_and_leaves_the_generator_unchanged(tmp_path):
    ctx = make_context(tmp_path, epsilon=1.0)
    generator = ctx.profile.generator()
    before = snapshot(generator.model)
    grads = {n: p.requires_grad for n, p in generator.model.named_parameters()}
    pairs = [
        {"prompt": PROMPTS[k], "chosen": CANDIDATES[k][0], "rejected": CANDIDATES[k][3]}
        for k in range(3)
    ]
    prompts = [p["prompt"] for p in pairs]

    def margin(gen):
        chosen = gen.logprobs(prompts, [p["chosen"] for p in pairs], chat=False)
        rejected = gen.logprobs(prompts, [p["rejected"] for p in pairs], chat=False)
        return chosen - rejected

    start = margin(generator)
    config = POPriConfig.from_config(
        {**POPri.configs["tiny"], "epochs": 2, "lr": 2e-2, "min_lr": 2e-3, "batch_size": 3}
    )
    with torch_threads(1), lora_policy(generator, config, None) as model:
        snapshots, loss = train_dpo(model, generator.tokenizer, pairs, config, str(tmp_path), 0)
        assert generator.model.config.use_cache  # sampling after DPO keeps its KV cache
        trained = margin(generator)
        with generator.adapted(model):  # the adapter folded into the weights scores the same
            np.testing.assert_allclose(margin(generator), trained, rtol=1e-4, atol=1e-3)
    assert len(snapshots) == 2 and math.isfinite(loss)
    assert not torch.equal(*(s[next(k for k in s if "lora_B" in k)] for s in snapshots[:2]))
    assert np.all(trained > start + 1.0)  # DPO raised log p(chosen) - log p(rejected)
    assert all(torch.equal(before[k], v) for k, v in generator.model.state_dict().items())
    assert {n: p.requires_grad for n, p in generator.model.named_parameters()} == grads
    np.testing.assert_allclose(margin(generator), start, atol=1e-4)


def test_dpo_reference_is_the_public_model_not_the_loaded_adapter(tmp_path):
    """From round 2 on the policy starts from the previous round's adapter; the DPO reference
    Ψ_ref must still be the public checkpoint (paper 000 §3.1), not a copy of that adapter."""
    ctx = make_context(tmp_path, epsilon=1.0)
    generator = ctx.profile.generator()
    config = POPriConfig.from_config(
        {**POPri.configs["tiny"], "epochs": 1, "batch_size": 2, "grad_accum_steps": 1}
    )
    with lora_policy(generator, config, None) as fresh:  # a previous round's (non-zero) adapter
        torch.manual_seed(0)
        with torch.no_grad():
            for name, param in fresh.named_parameters():
                if "lora_B" in name:
                    param.normal_(0.0, 0.05)
        previous = adapter_weights(fresh)
    pairs = [
        {"prompt": PROMPTS[k], "chosen": CANDIDATES[k][0], "rejected": CANDIDATES[k][3]}
        for k in range(2)
    ]
    reference_calls = []  # the trainer's forward passes without gradients are its reference

    def record(module, args, kwargs, output):
        if not torch.is_grad_enabled():
            reference_calls.append((dict(kwargs), output.log_probs.clone()))

    with torch_threads(1), lora_policy(generator, config, previous) as model:
        handle = model.register_forward_hook(record, with_kwargs=True)
        try:
            train_dpo(model, generator.tokenizer, pairs, config, str(tmp_path), 0)
        finally:
            handle.remove()
        assert reference_calls
        set_peft_model_state_dict(model, previous)
        with torch.no_grad():
            for kwargs, reference in reference_calls:
                with model.disable_adapter():
                    public = model(**kwargs).log_probs
                loaded = model(**kwargs).log_probs
                torch.testing.assert_close(reference, public)
                assert (reference - loaded).abs().max() > 1e-2
        assert list(model.peft_config) == ["default"]  # no "ref" copy of the loaded adapter


def test_popri_end_to_end_releases_texts_within_budget(tmp_path):
    eps, delta, q = 4.0, 1e-5, 0.5
    ctx = make_context(tmp_path, epsilon=eps, delta=delta)
    method = POPri(POPri.resolve_config("tiny", {"epochs": 1, "sample_rate": q}))
    generator = ctx.profile.generator()
    before = snapshot(generator.model)
    with torch_threads(1):
        state = run_rounds(method, ctx)
        artifact = finish(method, ctx, state)

    assert artifact.kind == "texts" == POPri.artifact_kind
    assert len(artifact.texts) == method.config["num_synthetic"]
    assert all(isinstance(t, str) and t for t in artifact.texts)
    assert all(torch.equal(before[k], v) for k, v in generator.model.state_dict().items())

    # the state the runner saves: small, picklable LoRA weights plus the selection record
    buffer = io.BytesIO()
    torch.save(state, buffer)
    assert buffer.tell() < 1_000_000
    loaded = torch.load(io.BytesIO(buffer.getvalue()), weights_only=False)
    assert loaded["adapter"].keys() == state["best"]["adapter"].keys()
    assert any("lora_B" in k and v.abs().sum() > 0 for k, v in loaded["adapter"].items())
    assert [h["round"] for h in loaded["history"]] == list(range(method.num_rounds()))
    assert loaded["best"]["fid"] == min(f for h in loaded["history"] for f in h["fid_per_epoch"])
    logged = {(d["name"], d["round"]): d["value"] for d in ctx.diagnostics.read()}
    for h in loaded["history"]:  # per-round FIDs and DPO loss are in the run's diagnostics
        assert logged[("popri_fid_per_epoch", h["round"])] == h["fid_per_epoch"]
        assert logged[("popri_dpo_loss", h["round"])] == h["dpo_loss"]

    sigma = method.noise_multiplier(ctx)  # ctx.noise_for(steps=rounds, sample_rate=q)
    releases = ctx.pool.ledger.releases
    assert [(r.mechanism, r.noise_multiplier, r.dim) for r in releases] == [
        (SUBSAMPLED_GAUSSIAN, sigma, method.config["num_prompts"] * 4)
    ] * method.num_rounds()
    assert all((r.sampling, r.sample_rate) == ("poisson", q) for r in releases)
    spent = epsilon_from_ledger(releases, delta)
    assert spent == pytest.approx(epsilon(sigma, q, method.num_rounds(), delta))
    assert 0.99 * eps < spent <= eps  # the smallest σ within budget


def test_cpu_config_is_working_scale():
    c = POPriConfig.from_config(POPri.resolve_config("cpu", {}))
    assert c.rounds >= 3 and c.num_prompts * c.samples_per_prompt >= 200
    steps_per_round = c.epochs * -(-c.num_prompts // c.batch_size)
    assert steps_per_round >= 4 and c.num_synthetic >= 1000
    assert (c.samples_per_prompt, c.rejected_rank) == (10, 5)  # paper 000 App. B.1
