"""The generator_only control: the generator's text from POPri's public 3-shot prompts, at
the LLM methods' release size, with no private signal (it never touches the pool)."""

import math

import pytest
from model_methods_support import PUBLIC, finish, make_context, torch_threads

from benchmark.privacy.accountants import epsilon_from_ledger
from leaderboard.catalog import SUITES
from leaderboard.suites import FIXED_EPSILONS
from methods.generator_only import GeneratorOnly
from methods.popri import POPri
from methods.private_evolution import FEW_SHOT_HEADER, FEW_SHOT_HEADING


class NoPool:
    """Stands in for the client pool: any use of it is a failure of the control."""

    def __getattr__(self, name):
        raise AssertionError(f"generator_only used the client pool ({name})")


def release(tmp_path, seed=0, **params):
    ctx = make_context(tmp_path, epsilon=0.0, seed=seed)
    method = GeneratorOnly(GeneratorOnly.resolve_config("tiny", params))
    with torch_threads(1):
        return ctx, finish(method, ctx, method.setup(ctx))


def test_it_releases_generated_texts_without_any_private_release(tmp_path):
    ctx, artifact = release(tmp_path)
    assert artifact.kind == "texts" == GeneratorOnly.artifact_kind
    assert len(artifact.texts) == GeneratorOnly.configs["tiny"]["num_synthetic"]
    assert all(isinstance(t, str) and t for t in artifact.texts)
    assert ctx.pool.ledger.releases == []
    assert epsilon_from_ledger(ctx.pool.ledger.releases, 1e-5) == 0


def test_it_never_touches_the_pool(tmp_path):
    ctx = make_context(tmp_path, epsilon=0.0)
    ctx.pool = NoPool()
    method = GeneratorOnly(GeneratorOnly.resolve_config("tiny", {"num_synthetic": 3}))
    with torch_threads(1):
        assert len(finish(method, ctx, method.setup(ctx)).texts) == 3


def test_its_prompts_are_popris_three_public_examples(tmp_path, monkeypatch):
    ctx = make_context(tmp_path, epsilon=0.0)
    generator = ctx.profile.generator()
    prompts = []
    real = type(generator).generate

    def spy(self, batch, params, chat=True):
        prompts.extend(batch)
        assert chat is False  # a plain LM prompt, as POPri's
        return real(self, batch, params, chat=chat)

    monkeypatch.setattr(type(generator), "generate", spy)
    method = GeneratorOnly(GeneratorOnly.resolve_config("tiny", {}))
    with torch_threads(1):
        finish(method, ctx, method.setup(ctx))
    assert prompts
    for prompt in prompts:
        assert prompt.startswith(FEW_SHOT_HEADER) and prompt.endswith(
            FEW_SHOT_HEADING.format(index=4)
        )
        body = prompt[len(FEW_SHOT_HEADER) : -len(FEW_SHOT_HEADING.format(index=4))]
        examples = [
            part.split("\n", 1)[1].strip() for part in body.split("Original Text Sample ")[1:]
        ]
        assert len(examples) == 3 and set(examples) <= set(PUBLIC)


def test_the_release_follows_the_spec_seed(tmp_path):
    first = release(tmp_path / "a", seed=1)[1].texts
    assert release(tmp_path / "b", seed=1)[1].texts == first
    assert release(tmp_path / "c", seed=2)[1].texts != first


def test_it_shares_popris_size_and_sampling_and_is_a_bench_control():
    for profile, config in GeneratorOnly.configs.items():
        for key, value in config.items():
            assert POPri.configs[profile][key] == value
    assert GeneratorOnly.role == "control"
    bench = SUITES["bench"]
    assert "generator_only" in bench.methods and FIXED_EPSILONS["generator_only"] == 0.0
    assert bench.budgets("generator_only") == (0.0,)
    params = {m: bench.method_params[m] for m in ("generator_only", "popri", "oracle")}
    assert params["generator_only"]["num_synthetic"] == params["popri"]["num_synthetic"]
    assert params["generator_only"]["num_synthetic"] == params["oracle"]["num_texts"]


@pytest.mark.parametrize(
    "bad", [{"num_synthetic": 0}, {"release_top_p": 0.0}, {"release_top_p": math.nan}]
)
def test_bad_settings_are_refused(bad):
    from benchmark.spec import SpecError

    with pytest.raises(SpecError):
        GeneratorOnly(GeneratorOnly.resolve_config("tiny", bad))
