"""PrE-Text end to end on the tiny profile: DP releases in the ledger, Expand from DP seeds."""

import math
import re

import pytest
import torch
from model_methods_support import finish, make_context, run_rounds

from benchmark.privacy.accountants import epsilon, epsilon_from_ledger, noise_multiplier_for
from benchmark.privacy.ledger import SUBSAMPLED_GAUSSIAN
from methods.pre_text import EPS_1_29_PARAMS, PreText
from methods.private_evolution import FEW_SHOT_HEADING

_EXAMPLE = re.compile(r"Original Text Sample [123]\n(.*?)\n\n", re.DOTALL)


class RecordingProfile:
    """The tiny profile, with the prompts sent to its generator recorded."""

    def __init__(self, profile):
        self.profile = profile
        self.prompts = []
        real = profile.generator()
        recorder = self

        class Recording:
            def __getattr__(self, name):
                return getattr(real, name)

            def generate(self, prompts, params, chat=True):
                recorder.prompts.extend(prompts)
                return real.generate(prompts, params, chat)

        self._generator = Recording()

    def generator(self):
        return self._generator

    def __getattr__(self, name):
        return getattr(self.profile, name)


def test_pre_text_releases_texts_expanded_from_dp_seeds(tmp_path):
    eps, delta = 2.0, 1e-5
    ctx = make_context(tmp_path, epsilon=eps, delta=delta)
    ctx.profile = RecordingProfile(ctx.profile)
    method = PreText(PreText.resolve_config("tiny", {}))
    state = run_rounds(method, ctx)
    torch.save(state, tmp_path / "state.pt")  # the runner checkpoints it after every round
    state = torch.load(tmp_path / "state.pt", weights_only=False)
    expand_start = len(ctx.profile.prompts)  # the rounds' variations do not use the generator
    artifact = finish(method, ctx, state)

    assert artifact.kind == "texts" == PreText.artifact_kind
    assert len(artifact.texts) == method.config["expand_size"]
    assert all(isinstance(t, str) and t and FEW_SHOT_HEADING[:15] not in t for t in artifact.texts)

    # Expand shows the LLM three DP seeds (∪_t Set(S'_t)) per prompt, nothing else
    seeds = set(state["seeds"])
    prompts = ctx.profile.prompts[expand_start:]
    assert len(prompts) >= method.config["expand_size"]
    for prompt in prompts:
        shown = _EXAMPLE.findall(prompt)
        assert len(shown) == 3 and set(shown) <= seeds
    public = {r["text"] for r in ctx.public}
    assert seeds & public and seeds - public  # S'_1 ⊂ public S_1; S'_2 are variations

    # T full-participation Gaussian releases at the noise the budget allows
    sigma = ctx.noise_for(steps=method.num_rounds(), sample_rate=1.0)
    releases = ctx.pool.ledger.releases
    assert len(releases) == method.num_rounds() == PreText.configs["tiny"]["iterations"]
    for r in releases:
        assert (r.mechanism, r.sample_rate, r.sensitivity) == (SUBSAMPLED_GAUSSIAN, 1.0, 1.0)
        assert r.noise_multiplier == sigma and r.dim == method.config["population_size"]
    spent = epsilon_from_ledger(releases, delta)
    assert spent == pytest.approx(epsilon(sigma, 1.0, method.num_rounds(), delta))
    assert spent <= eps


# Paper 004 App. D.2: the histogram counts up to 8 votes per client and its noise std is
# 8 × σ × 1.541 × √2; H is given in those count units.
PAPER_NOISE_SCALE = 8 * 1.541 * math.sqrt(2)


def paper_h(threshold_std: float, sigma: float) -> float:
    """H in paper 004's count units for ``threshold_std`` noise stds at noise multiplier σ."""
    return threshold_std * sigma * PAPER_NOISE_SCALE


def test_paper_config_is_app_d2_at_eps_7_58():
    c = PreText.resolve_config("paper", {})
    stated = {
        "iterations": 11,
        "population_size": 2048,
        "lookahead": 4,
        "variation_steps": 2,
        "mask_fraction": 0.3,
        "max_samples_per_client": 8,
        "min_words": 21,
        "expand_size": 2_000_000,
    }
    assert {k: c[k] for k in stated} == stated
    assert c["threshold_std"] == pytest.approx(0.433, abs=5e-4)
    # H = 8 × 1.541 × √2 at the paper's σ = 2.31, and at the σ our accountant gives for
    # ε = 7.58, δ = 3e-6, T = 11
    sigma = noise_multiplier_for(7.58, 3e-6, sample_rate=1.0, steps=11)
    assert sigma == pytest.approx(2.31, abs=5e-3)
    assert paper_h(c["threshold_std"], 2.31) == pytest.approx(PAPER_NOISE_SCALE, rel=1e-12)
    assert paper_h(c["threshold_std"], sigma) == pytest.approx(PAPER_NOISE_SCALE, rel=3e-3)


def test_eps_1_29_params_are_app_d2():
    c = PreText.resolve_config("paper", EPS_1_29_PARAMS)
    sigma = noise_multiplier_for(1.29, 3e-6, sample_rate=1.0, steps=11)
    assert sigma == pytest.approx(11.3, abs=0.05)
    assert c["population_size"] == 1024
    assert paper_h(c["threshold_std"], 11.3) == pytest.approx(5.9 * PAPER_NOISE_SCALE)


def test_cpu_config_is_working_scale():
    c = PreText.resolve_config("cpu", {})
    assert c["iterations"] >= 3 and c["lookahead"] >= 1 and c["population_size"] >= 200
    assert c["expand_size"] >= 1000
