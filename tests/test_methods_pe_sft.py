"""PE+SFT on the tiny profile: selection, SFT of the generator (full and LoRA), release."""

import math

import numpy as np
import pytest
import torch
from model_methods_support import finish, make_context, run_rounds

from benchmark.privacy.accountants import epsilon, epsilon_from_ledger, noise_multiplier_for
from benchmark.privacy.ledger import SUBSAMPLED_GAUSSIAN
from methods.pe_sft import PESFT, SFTConfig, fine_tuned, top_scoring
from methods.private_evolution import few_shot_prompt

PAIRS = [
    (few_shot_prompt(["The cat sat.", "A man ate.", "Rain fell."]), "Bake the bread slowly."),
    (few_shot_prompt(["The train left.", "She smiled.", "Wind blew."]), "Bake the cake slowly."),
]


def snapshot(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_top_scoring_keeps_the_highest_scores_in_order():
    seeds = {"a": 0.5, "b": 3.0, "c": -1.0, "d": 3.0, "e": 2.0}
    assert top_scoring(seeds, 3) == ["b", "d", "e"]
    assert top_scoring(seeds, 10) == ["b", "d", "e", "a", "c"]


def test_paper_config_uses_paper_000s_sequence_length():
    paper = PESFT.configs["paper"]  # paper 000 §5: maximum sequence length 64
    assert paper["sft_max_completion_tokens"] == paper["generate_max_new_tokens"] == 64


def test_paper_config_is_paper_000s_pe_baseline():
    c = PESFT.resolve_config("paper", {})  # App. C.3: T = 20, N_syn = 1024, H = 0.1626
    assert (c["iterations"], c["population_size"]) == (20, 1024)
    # H = 0.1626 is the reference code's H_multiplier: H = 4 × 0.1626 × s × σ against a
    # noise std of 1.541 × √2 × s × σ
    assert c["threshold_std"] * 1.541 * math.sqrt(2) / 4 == pytest.approx(0.1626, rel=1e-12)
    # in vote units: one client's whole vote at paper 000's ε = 7 noise (σ = 3.35)
    sigma = noise_multiplier_for(7.0, 3e-6, sample_rate=1.0, steps=20)
    assert sigma == pytest.approx(3.35, abs=0.02)
    assert c["threshold_std"] * 3.35 == pytest.approx(1.0, abs=1e-3)


def test_cpu_config_is_working_scale():
    c = PESFT.resolve_config("cpu", {})
    assert c["iterations"] >= 3 and c["lookahead"] >= 1 and c["population_size"] >= 200
    assert c["generate_size"] >= 1000
    assert c["sft_epochs"] * c["sft_top_k"] // c["sft_batch_size"] >= 20


@pytest.mark.parametrize("lora_r", [0, 4])
def test_sft_fits_the_completions_and_restores_the_generator(tmp_path, lora_r):
    generator = make_context(tmp_path, epsilon=1.0).profile.generator()
    before = snapshot(generator.model)
    grads = {n: p.requires_grad for n, p in generator.model.named_parameters()}
    prompts, completions = map(list, zip(*PAIRS, strict=True))
    start = generator.logprobs(prompts, completions)
    config = SFTConfig(
        epochs=8, lr=1e-2, batch_size=2, lora_r=lora_r, lora_alpha=8, max_completion_tokens=16
    )
    with fine_tuned(generator, PAIRS, config, seed=0) as tuned:
        tuned_lp = generator.logprobs(prompts, completions)
        trained = [n for n, p in tuned.named_parameters() if p.requires_grad]
        if lora_r:  # only the adapters train; the base weights stay as they were
            assert trained and all("lora_" in n for n in trained)
        else:
            assert any(not torch.equal(before[k], v) for k, v in tuned.state_dict().items())
        with generator.adapted(tuned):  # what the release samples scores as trained
            np.testing.assert_allclose(
                generator.logprobs(prompts, completions), tuned_lp, rtol=1e-4, atol=1e-3
            )
    assert np.all(tuned_lp > start + 3.0)  # the completions became much more likely
    after = snapshot(generator.model)
    assert after.keys() == before.keys()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert {n: p.requires_grad for n, p in generator.model.named_parameters()} == grads
    assert np.allclose(generator.logprobs(prompts, completions), start, atol=1e-4)


def test_pe_sft_releases_generated_texts_within_budget(tmp_path):
    eps, delta = 2.0, 1e-5
    ctx = make_context(tmp_path, epsilon=eps, delta=delta)
    method = PESFT(PESFT.resolve_config("tiny", {"lookahead": 0}))  # pre_text tests lookahead
    generator = ctx.profile.generator()
    before = snapshot(generator.model)
    state = run_rounds(method, ctx)
    artifact = finish(method, ctx, state)

    assert artifact.kind == "texts" == PESFT.artifact_kind
    assert len(artifact.texts) == method.config["generate_size"]
    assert all(isinstance(t, str) and t for t in artifact.texts)
    assert all(torch.equal(before[k], v) for k, v in generator.model.state_dict().items())

    releases = ctx.pool.ledger.releases
    sigma, steps = releases[0].noise_multiplier, method.num_rounds()
    assert len(releases) == steps
    assert all(
        (r.mechanism, r.noise_multiplier, r.sample_rate, r.sensitivity)
        == (SUBSAMPLED_GAUSSIAN, sigma, 1.0, 1.0)
        for r in releases
    )
    spent = epsilon_from_ledger(releases, delta)
    assert spent == pytest.approx(epsilon(sigma, 1.0, steps, delta))
    assert spent <= eps < epsilon(sigma * 0.999, 1.0, steps, delta)  # no noise wasted
