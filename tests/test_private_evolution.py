"""The Private Evolution core: DP histogram, threshold, resampling, seeds, Expand prompt."""

import math

import numpy as np
import pytest
from model_methods_support import make_context, run_rounds

from benchmark.data import FederatedSplit
from benchmark.federation.clients import ClientBatch, ClientData, client_scope
from benchmark.privacy.ledger import NONPRIVATE
from benchmark.profiles.base import Generator, SamplingParams
from benchmark.profiles.embedders import HashedNgramEmbedder
from methods import private_evolution as pe
from methods.pre_text import PreText

POPULATION = [
    "The harbour was full of fishing boats at dawn.",
    "Bake the bread for forty minutes in a hot oven.",
    "The senator voted against the farm bill on Tuesday.",
    "Our football team won the cup after extra time.",
]


def pe_config(**overrides):
    return pe.PEConfig.from_config({**PreText.configs["tiny"], **overrides})


def split_of(clients, public=POPULATION):
    train = [{"text": t, "client_id": cid} for cid, texts in clients.items() for t in texts]
    public = [{"text": t, "client_id": "public"} for t in public]
    return FederatedSplit("toy", {"version": "v"}, {"train": train, "public": public})


def test_paper_noise_multipliers_are_reproduced(tmp_path):
    """Paper 004 App. D.1: T = 11 full-participation releases, δ = 3e-6."""
    for epsilon, sigma in ((1.29, 11.3), (7.58, 2.31)):
        ctx = make_context(tmp_path, epsilon=epsilon, delta=3e-6)
        assert ctx.noise_for(steps=11, sample_rate=1.0) == pytest.approx(sigma, rel=0.01)


def test_histogram_equals_hand_computed_votes(tmp_path):
    # Client texts are population samples verbatim, so each votes for its own copy (L = 0).
    # A cap of 2 drops the third sample of "a" and of "c".
    p0, p1, p2, p3 = POPULATION
    clients = {"a": [p0, p0, p2], "b": [p1], "c": [p3, p1, p2]}
    ctx = make_context(tmp_path, epsilon=math.inf, split=split_of(clients))
    embeddings = ctx.profile.embedder().embed(POPULATION)
    hist = pe.dp_histogram(ctx, embeddings, pe_config(max_samples_per_client=3), 0.0, 0)
    capped = pe.dp_histogram(ctx, embeddings, pe_config(max_samples_per_client=2), 0.0, 1)

    a3 = np.array([2.0, 0, 1, 0]) / math.sqrt(5)
    a2 = np.array([1.0, 0, 0, 0])
    b = np.array([0.0, 1, 0, 0])
    c3 = np.array([0.0, 1, 1, 1]) / math.sqrt(3)
    c2 = np.array([0.0, 1, 0, 1]) / math.sqrt(2)
    np.testing.assert_allclose(hist, a3 + b + c3, atol=1e-9)
    np.testing.assert_allclose(capped, a2 + b + c2, atol=1e-9)
    releases = ctx.pool.ledger.releases
    assert [r.mechanism for r in releases] == [NONPRIVATE, NONPRIVATE]
    assert all(r.dim == 4 and r.sensitivity == pe.CLIP_NORM for r in releases)


def test_client_vote_vectors_have_unit_norm():
    rng = np.random.default_rng(0)
    words = ["river", "boat", "bread", "oven", "vote", "bill", "team", "cup", "rain", "hill"]
    clients = [
        ClientData([{"text": " ".join(rng.choice(words, 6))} for _ in range(n)], {})
        for n in (0, 1, 3, 7, 20)
    ]
    votes = pe.VoteFunction(HashedNgramEmbedder(), cap=8)
    synthetic = rng.normal(size=(12, 384)).astype(np.float32)
    with client_scope():
        rows = votes(ClientBatch(clients), {"synthetic": synthetic})
    norms = np.linalg.norm(rows, axis=1)
    np.testing.assert_allclose(norms, [0, 1, 1, 1, 1], atol=1e-12)
    assert rows.shape == (5, 12) and (rows >= 0).all()
    assert vars(votes) == {"embedder": votes.embedder, "cap": 8}  # no private state kept


def test_nearest_neighbours_is_exact_across_blocks(monkeypatch):
    monkeypatch.setattr(pe, "NN_BLOCK_ROWS", 7)
    rng = np.random.default_rng(1)
    queries, points = rng.normal(size=(30, 5)), rng.normal(size=(11, 5)) * 2
    index, dist = pe.nearest_neighbours(queries, points)
    brute = np.linalg.norm(queries[:, None] - points[None], axis=2)
    np.testing.assert_array_equal(index, brute.argmin(1))
    np.testing.assert_allclose(dist, brute.min(1), rtol=1e-4)


def test_threshold_and_resampling():
    hist = np.array([5.0, 0.5, -2.0, 3.0])
    kept = pe.threshold_histogram(hist, threshold_std=0.5, noise_multiplier=2.0)  # H = 1
    np.testing.assert_allclose(kept, [4.0, 0.0, 0.0, 2.0])
    draws = pe.resample(kept, 30_000, np.random.default_rng(0))
    np.testing.assert_allclose(
        np.bincount(draws, minlength=4) / 30_000, [2 / 3, 0, 0, 1 / 3], atol=0.01
    )
    uniform = pe.resample(np.zeros(4), 4_000, np.random.default_rng(0))
    assert set(np.unique(uniform)) == {0, 1, 2, 3}


def test_seed_set_is_the_union_of_survivors_with_best_scores():
    population = ["x", "y", "x", "z"]
    seeds = pe.update_seeds({}, population, np.array([1.0, 2.0, 0.5, -1.0]), np.array([0, 0, 1]))
    assert seeds == {"x": 1.5, "y": 2.0}  # duplicate "x" adds up its votes; "z" not drawn
    seeds = pe.update_seeds(seeds, ["x", "w"], np.array([0.2, 4.0]), np.array([0, 1]))
    assert seeds == {"x": 1.5, "y": 2.0, "w": 4.0}


def test_initial_population_comes_from_long_enough_public_texts():
    pool = ["one two three", "a b c d e", "x y z w v u"]
    population = pe.initial_population(pool, 3, np.random.default_rng(0))
    assert sorted(population) == sorted(pool)  # without replacement when possible
    assert set(pe.initial_population(pool, 10, np.random.default_rng(0))) <= set(pool)


def test_few_shot_prompt_and_parse_follow_figure_3():
    prompt = pe.few_shot_prompt(["first text", "second text ", "third text"])
    assert prompt.startswith("List of 6 diverse original text samples:\n\n")
    for i, text in enumerate(["first text", "second text", "third text"], start=1):
        assert f"Original Text Sample {i}\n{text}\n\n" in prompt
    assert prompt.endswith("Original Text Sample 4\n")
    generated = " a new sample\nwith two lines\n\nOriginal Text Sample 5\nmore"
    assert pe.parse_generated(generated) == "a new sample\nwith two lines"
    assert pe.parse_generated("no heading at all ") == "no heading at all"


class ScriptedGenerator(Generator):
    """Test double: returns scripted continuations and records the prompts it saw."""

    def __init__(self, outputs):
        self.outputs = list(outputs)
        self.prompts = []

    def generate(self, prompts, params, chat=True):
        self.prompts.extend(prompts)
        return [self.outputs.pop(0) for _ in prompts]

    def logprobs(self, prompts, completions):
        raise NotImplementedError


def test_expand_prompts_with_three_examples_and_drops_empty_samples():
    examples = ["alpha text", "beta text", "gamma text", "delta text"]
    gen = ScriptedGenerator(["s1", "", "s2\nOriginal Text Sample 5\njunk", "s3", "s4"])
    out = pe.expand(gen, examples, 3, SamplingParams(), 2, np.random.default_rng(0))
    assert out == ["s1", "s2", "s3"]
    for prompt in gen.prompts:
        shown = [e for e in examples if f"\n{e}\n\n" in prompt]
        assert len(shown) == 3
    stuck = ScriptedGenerator([""] * 8)
    assert pe.expand(stuck, examples, 2, SamplingParams(), 2, np.random.default_rng(0)) == []
    assert len(stuck.prompts) == 8  # gives up after max_attempts × size prompts
    with pytest.raises(ValueError, match="batch size"):  # a batch of 0 would loop forever
        pe.expand(gen, examples, 3, SamplingParams(), 0, np.random.default_rng(0))


class NoFillerProfile:
    def __init__(self, generator):
        self._generator = generator

    def masked_filler(self):
        return None

    def generator(self):
        return self._generator


def test_variation_falls_back_to_generator_paraphrase():
    gen = ScriptedGenerator(["  new words\n\nrest", "", "again", "x"])
    variation = pe.Variation(NoFillerProfile(gen), pe_config(variation_steps=2))
    assert variation(["old one", "old two"], seed=0) == ["again", "x"]
    assert gen.prompts[0] == pe.PARAPHRASE_PROMPT.format(text="old one")
    assert gen.prompts[3] == pe.PARAPHRASE_PROMPT.format(text="old two")  # kept unchanged


def test_pe_moves_the_population_towards_the_private_data(tmp_path):
    private = [f"the fishing boats sail from the harbour at dawn {i}" for i in range(12)]
    public = [f"the fishing boats rest in the harbour at noon {i}" for i in range(6)]
    public += [f"the senate passed a new budget law for schools {i}" for i in range(6)]
    clients = {f"c{i}": private[2 * i : 2 * i + 2] for i in range(6)}
    ctx = make_context(tmp_path, epsilon=30.0, split=split_of(clients, public))
    method = PreText(
        PreText.resolve_config(
            "tiny", {"iterations": 2, "population_size": 12, "lookahead": 0, "threshold_std": 0.5}
        )
    )
    embed = ctx.profile.embedder().embed
    towards = embed(private).mean(0) - embed(public[6:]).mean(0)

    def near_share(texts):  # closer to the private centre than to the off-topic one
        return float(np.mean(embed(texts) @ towards > 0))

    state = method.setup(ctx)
    before = near_share(state["population"])
    state = run_rounds(method, ctx, state)
    assert 0.3 < before < 0.7
    assert near_share(list(state["seeds"])) == 1.0
    assert near_share(state["population"]) > before + 0.25
