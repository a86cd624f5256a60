"""Private Evolution (PE) for federated text: the core shared by ``pre_text`` and ``pe_sft``.

Paper 004 (PrE-Text) Algorithms 1–2, one PE iteration per harness round:

- Alg. 1 line 2 — initial population ``S_1``: ``population_size`` public texts with more
  than ``min_words - 1`` words (:func:`initial_population`).
- Alg. 2 / §3 "Lookahead" — every synthetic sample ``z`` is represented by the mean
  embedding of ``lookahead`` variations of it (``lookahead = 0``: the embedding of ``z``
  itself); only these embeddings are sent to the clients, never the texts.
- Alg. 2 lines 8–13 — on each client, every private sample votes for its nearest
  synthetic sample under the paper's distance ``‖Φ(x) − mean_k Φ(z^k)‖₂`` (exact search,
  one blocked matrix product for all clients of the batch; :func:`nearest_neighbours`).
- Alg. 2 line 14 — user-level DP: each client's vote vector is L2-normalised to 1
  (DPSDA's ``vote_normalization_level="client"``), so one client changes the sum by at
  most 1 and the harness's ``clip_norm = 1`` is the sensitivity. The harness pool adds
  ``N(0, σ²)`` to the sum once; the paper's per-client ``N(0, σ²/|C|)`` shares sum to the
  same noise. σ comes from ``ctx.noise_for(steps=T, sample_rate=1)``: T full-participation
  Gaussian releases, as in paper 004 App. D.1 (σ = 11.3 ↔ ε = 1.29 at δ = 3e-6, T = 11).
  The paper's histogram holds raw counts with sensitivity = the per-client cap, and its
  reference code adds 1.541·√2 times the accounted noise; here a client's votes weigh 1 in
  L2 whatever their number, and exactly the accounted noise is added.
- Alg. 2 line 17 — threshold ``hist ← max(hist − H, 0)``, H = ``threshold_std`` noise stds.
- Alg. 1 lines 7–8 — draw ``S'_t``: ``population_size`` samples ∝ the thresholded
  histogram (with replacement).
- Alg. 1 line 9 — ``S_{t+1} = Variation(S'_t)``: ``variation_steps`` (W_steps) rounds of
  re-filling ``mask_fraction`` of the tokens with the profile's masked filler
  (RoBERTa-large in ``paper``); if the profile has no masked filler, the generator
  paraphrases each text with :data:`PARAPHRASE_PROMPT`.
- Alg. 1 line 11 — the DP seed set is ``∪_t Set(S'_t)``; each seed keeps its score, the
  largest noisy histogram value it received (``pe_sft`` selects on it). All of this is
  post-processing of the noisy releases.
- :func:`expand` — ``Expand`` with the 3-shot prompt of paper 004 Fig. 3
  (:func:`few_shot_prompt`), the generated sample being the text between the 4th and the
  5th sample heading.

Choices the paper leaves open (and why):
- Per-client contribution cap: the client function uses only the first
  ``max_samples_per_client`` samples of a client (record order of the split, so it is
  deterministic). With client-level normalisation the vote vector has norm ≤ 1 whatever the
  cap, so the cap does not carry the sensitivity argument here; it mirrors the paper's
  bound (8 samples per client, 16 on CODE) so votes are spread as in the paper, and bounds
  client compute. Clients without any sample send a zero vector.
- Units of H (``threshold_std``): H is given in units of the noise std actually added,
  ``H = threshold_std × σ × clip_norm`` (:func:`threshold_histogram`); in vote units that is
  ``threshold_std × σ`` client-votes (a client's whole vote vector weighs 1 in L2). The
  papers give H in their own count units, where the histogram holds raw votes (up to
  ``s`` = 8 per client) and the noise std is ``s × σ × 1.541 × √2`` (paper 004 App. D.2;
  the reference code inflates the accounted σ by 1.541·√2). One noise std maps to one noise
  std, so ``threshold_std = H_paper / (s × σ × 1.541 × √2)``:
  paper 004 ε = 7.58 (σ = 2.31): H = 8 × 1.541 × √2 → 1/2.31 = 0.433 std;
  paper 004 ε = 1.29 (σ = 11.3): H = 5.9 × 8 × 1.541 × √2 → 5.9/11.3 = 0.522 std;
  paper 000 App. C.3: H = 0.1626, which is the reference code's ``H_multiplier`` (its H is
  ``s × σ × 4 × H_multiplier`` against a noise std of ``s × σ × 1.541 × √2``), so
  4 × 0.1626 / (1.541 × √2) = 0.2985 std, i.e. 1/3.35: one client's worth of votes at its
  ε = 7 noise (σ = 3.35), the same rule as paper 004's ε = 7.58 setting. Read as raw votes
  against a noise std of 19.3 × 8, 0.1626 would be 1e-3 std, no threshold at all.
- If nothing survives the threshold (all noise), ``S'_t`` is drawn uniformly from ``S_t``
  — the release then carries no usable signal and the population is kept as it is.
- The initial population is drawn without replacement when the public set is large
  enough, with replacement otherwise (the reference code always samples with
  replacement, which only adds duplicates).
- Ties in the nearest-neighbour search go to the lowest index; duplicate texts in a
  population add up their votes in the seed score.
- The last round does not vary ``S'_T`` (``S_{T+1}`` is never used).
- Variation with a masked LM fills all masks of a text in one forward pass and keeps texts
  at full length; PrE-Text's reference code refills masks one at a time and truncates the
  population to 64 tokens. The paper states neither; one pass is W_steps× cheaper.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from benchmark.api import (
    TEXT,
    ClientBatch,
    ClientData,
    Embedder,
    Generator,
    Method,
    MethodContext,
    ModelProfile,
    SamplingParams,
)

CLIP_NORM = 1.0  # each client's vote vector has L2 norm 1 (user-level sensitivity)
NN_BLOCK_ROWS = 4096  # private samples per block of the nearest-neighbour matrix product

# Paper 004 App. B / Fig. 3, the Expand prompt as the paper gives it: a header announcing six
# samples, three numbered examples, and the 4th heading left open for the LLM to fill.
FEW_SHOT_HEADER = "List of 6 diverse original text samples:\n\n"
FEW_SHOT_HEADING = "Original Text Sample {index}\n"
_NEXT_HEADING = re.compile(r"\n?\s*Original text sample\s*\d*\s*:?", re.IGNORECASE)

PARAPHRASE_PROMPT = (
    "Rewrite the text below in different words. Keep its topic, tone and length.\n\n"
    "Text:\n{text}\n\nRewritten text:\n"
)


# Default PE settings per profile; adapters extend them with their own keys. ``PE_PAPER`` is
# paper 004 App. D.2 at ε = 7.58 (N_syn = 2048, H = 8 × 1.541 × √2 = 1/2.31 noise stds,
# see "Units of H"), T = 11 (App. D.1), lookahead 4 (§3 and the reference code), W_steps = 2,
# MASK% = 30 %, 8 samples per client, initial texts of more than 20 words.
PE_PAPER = {
    "iterations": 11,
    "population_size": 2048,
    "lookahead": 4,
    "threshold_std": 1 / 2.31,
    "max_samples_per_client": 8,
    "mask_fraction": 0.3,
    "variation_steps": 2,
    "min_words": 21,
    "variation_max_new_tokens": 85,
}
# cpu: several releases, hundreds of samples and real lookahead, sized for 2 cores, where
# the mask fills bound the budget: docs/measurements/working-scale.md#private_evolution
# W_steps = 1: one 30 % pass already rewrites a third of a text.
PE_CPU = {
    **PE_PAPER,
    "iterations": 3,
    "population_size": 256,
    "lookahead": 1,
    "variation_steps": 1,
    "variation_max_new_tokens": 64,
}
PE_TINY = {
    **PE_CPU,
    "iterations": 2,
    "population_size": 8,
    "lookahead": 1,
    "min_words": 1,
    "variation_max_new_tokens": 12,
}


@dataclass(frozen=True)
class PEConfig:
    """The PE hyper-parameters (paper 004 App. D.2 values in the adapters' ``paper`` config)."""

    iterations: int  # T: PE iterations = DP releases
    population_size: int  # N_syn
    lookahead: int  # K: variations averaged per lookahead embedding (0 = none)
    threshold_std: float  # H in units of the noise std (σ · clip_norm)
    max_samples_per_client: int  # contribution cap
    mask_fraction: float  # MASK%
    variation_steps: int  # W_steps
    min_words: int  # public texts need at least this many words for S_1
    variation_max_new_tokens: int  # only for the generator-paraphrase fallback

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> PEConfig:
        return cls(**{f.name: config[f.name] for f in fields(cls)})

    def __post_init__(self) -> None:
        if self.iterations < 1 or self.population_size < 1 or self.max_samples_per_client < 1:
            raise ValueError("iterations, population_size and max_samples_per_client must be >= 1")
        if self.lookahead < 0 or self.variation_steps < 1 or self.threshold_std < 0:
            raise ValueError("lookahead >= 0, variation_steps >= 1 and threshold_std >= 0 required")


def _seed(rng: np.random.Generator) -> int:
    return int(rng.integers(2**31 - 1))


def eligible_public(ctx: MethodContext, min_words: int) -> list[str]:
    """The public texts with at least ``min_words`` words (paper 004: more than 20)."""
    pool = [r[TEXT] for r in ctx.public if len(r[TEXT].split()) >= min_words]
    if not pool:
        raise ValueError(
            f"no public text has {min_words} or more words; lower min_words or use a split "
            "with a larger public part"
        )
    return pool


def initial_population(pool: list[str], size: int, rng: np.random.Generator) -> list[str]:
    """Alg. 1 line 2: ``size`` texts of ``pool`` (without replacement when it is large enough)."""
    index = rng.choice(len(pool), size=size, replace=len(pool) < size)
    return [pool[i] for i in index]


class Variation:
    """``Variation`` of paper 004 §3 (4): ``steps`` rounds of mask-and-refill.

    Uses the profile's masked filler; without one, the generator paraphrases each text
    (one generation per step, :data:`PARAPHRASE_PROMPT`, the first paragraph kept; a text
    whose paraphrase comes back empty is kept unchanged).
    """

    def __init__(self, profile: ModelProfile, config: PEConfig) -> None:
        self.profile = profile
        self.config = config
        self.filler = profile.masked_filler()

    def __call__(self, texts: list[str], seed: int) -> list[str]:
        rng = np.random.default_rng(seed)
        for _ in range(self.config.variation_steps):
            if self.filler is not None:
                texts = self.filler.fill(texts, self.config.mask_fraction, _seed(rng))
            else:
                texts = self._paraphrase(texts, _seed(rng))
        return texts

    def _paraphrase(self, texts: list[str], seed: int) -> list[str]:
        params = SamplingParams(
            max_new_tokens=self.config.variation_max_new_tokens, temperature=1.0, seed=seed
        )
        prompts = [PARAPHRASE_PROMPT.format(text=t) for t in texts]
        outputs = self.profile.generator().generate(prompts, params, chat=False)
        rewritten = [o.strip().split("\n\n")[0].strip() for o in outputs]
        return [new or old for new, old in zip(rewritten, texts, strict=True)]


def lookahead_embeddings(
    texts: list[str], embedder: Embedder, variation: Variation, lookahead: int, seed: int
) -> np.ndarray:
    """Mean embedding of ``lookahead`` variations of each text (the text itself when 0)."""
    if lookahead == 0:
        return np.asarray(embedder.embed(texts), dtype=np.float32)
    rng = np.random.default_rng(seed)
    total = np.zeros((len(texts), embedder.dim), dtype=np.float64)
    for _ in range(lookahead):
        total += embedder.embed(variation(texts, _seed(rng)))
    return (total / lookahead).astype(np.float32)


def nearest_neighbours(queries: np.ndarray, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exact L2 nearest neighbour in ``points`` of each query row: (index, distance).

    ``argmin_j ‖x − z_j‖² = argmin_j (‖z_j‖² − 2 x·z_j)``: one matrix product per block of
    :data:`NN_BLOCK_ROWS` queries.
    """
    points = np.asarray(points, dtype=np.float32)
    point_sq = np.einsum("ij,ij->i", points, points)
    index = np.empty(len(queries), dtype=np.int64)
    dist = np.empty(len(queries), dtype=np.float64)
    for start in range(0, len(queries), NN_BLOCK_ROWS):
        block = np.asarray(queries[start : start + NN_BLOCK_ROWS], dtype=np.float32)
        scores = point_sq[None, :] - 2.0 * (block @ points.T)
        best = np.argmin(scores, axis=1)
        index[start : start + len(block)] = best
        query_sq = np.einsum("ij,ij->i", block, block)
        sq = query_sq + scores[np.arange(len(block)), best]
        dist[start : start + len(block)] = np.sqrt(np.maximum(sq, 0.0))
    return index, dist


class VoteFunction:
    """Alg. 2 lines 8–13 on the clients (batched): one L2-normalised vote vector per client.

    Each client embeds its first ``cap`` samples once (client memo). The payload is the
    public lookahead embeddings of the population. Nothing but the returned vote rows leaves
    the client (no state is kept on this object, which server code holds).
    """

    def __init__(self, embedder: Embedder, cap: int) -> None:
        self.embedder = embedder
        self.cap = cap

    def _embed(self, clients: list[ClientData]) -> np.ndarray:
        texts = [c.texts[: self.cap] for c in clients]
        flat = [t for ts in texts for t in ts]
        vectors = np.asarray(self.embedder.embed(flat), dtype=np.float32).reshape(
            len(flat), self.embedder.dim
        )
        out = np.zeros((len(clients), self.cap, self.embedder.dim), dtype=np.float32)
        start = 0
        for row, ts in enumerate(texts):
            out[row, : len(ts)] = vectors[start : start + len(ts)]
            start += len(ts)
        return out

    def _count(self, clients: list[ClientData]) -> np.ndarray:
        return np.array([min(len(c.texts), self.cap) for c in clients])

    def __call__(self, batch: ClientBatch, payload: dict[str, Any]) -> np.ndarray:
        synthetic = payload["synthetic"]
        key = f"pe:{self.embedder.name}:{self.cap}"
        embeds = batch.memo_rows(key + ":embeddings", self._embed)
        counts = batch.memo_rows(key + ":count", self._count)
        valid = np.arange(self.cap)[None, :] < counts[:, None]
        owner = np.broadcast_to(np.arange(len(counts))[:, None], valid.shape)[valid]
        nearest, _ = nearest_neighbours(embeds[valid], synthetic)
        votes = np.zeros((len(counts), len(synthetic)))
        np.add.at(votes, (owner, nearest), 1.0)
        norms = np.linalg.norm(votes, axis=1, keepdims=True)
        return votes / np.maximum(norms, 1e-12)


def dp_histogram(
    ctx: MethodContext,
    embeddings: np.ndarray,
    config: PEConfig,
    noise_multiplier: float,
    round_index: int,
) -> np.ndarray:
    """Alg. 2: the noisy nearest-neighbour histogram over the population (one release)."""
    votes = VoteFunction(ctx.profile.embedder(), config.max_samples_per_client)
    aggregate = ctx.pool.aggregate(
        votes,
        {"synthetic": embeddings},
        dim=len(embeddings),
        clip_norm=CLIP_NORM,
        noise_multiplier=noise_multiplier,
        sample_rate=1.0,
        label=f"pe_histogram_round{round_index}",
        batched=True,
    )
    return aggregate.noisy_sum


def threshold_histogram(
    hist: np.ndarray, threshold_std: float, noise_multiplier: float
) -> np.ndarray:
    """Alg. 2 line 17 with ``H = threshold_std × σ × clip_norm`` (in noise stds)."""
    return np.maximum(hist - threshold_std * noise_multiplier * CLIP_NORM, 0.0)


def resample(weights: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    """Alg. 1 lines 7–8: indices drawn ∝ ``weights`` (uniformly if all are zero)."""
    total = weights.sum()
    p = weights / total if total > 0 else None
    return rng.choice(len(weights), size=size, replace=True, p=p)


def update_seeds(
    seeds: dict[str, float], population: list[str], hist: np.ndarray, chosen: np.ndarray
) -> dict[str, float]:
    """Alg. 1 line 11: add ``Set(S'_t)``; a seed's score is its best noisy vote total."""
    votes: dict[str, float] = {}
    for text, value in zip(population, hist, strict=True):
        votes[text] = votes.get(text, 0.0) + float(value)
    out = dict(seeds)
    for i in chosen:
        text = population[i]
        out[text] = max(out.get(text, -math.inf), votes[text])
    return out


def few_shot_prompt(examples: list[str]) -> str:
    """Paper 004 Fig. 3: three numbered examples, then the open 4th heading."""
    body = "".join(
        FEW_SHOT_HEADING.format(index=i + 1) + text.strip() + "\n\n"
        for i, text in enumerate(examples)
    )
    return FEW_SHOT_HEADER + body + FEW_SHOT_HEADING.format(index=len(examples) + 1)


def parse_generated(text: str) -> str:
    """The generated sample: everything before the next sample heading, stripped."""
    return _NEXT_HEADING.split(text, maxsplit=1)[0].strip()


def expand(
    generator: Generator,
    examples: list[str],
    size: int,
    params: SamplingParams,
    batch_size: int,
    rng: np.random.Generator,
    max_attempts: int = 4,
) -> list[str]:
    """``Expand``: ``size`` samples, each from a prompt with 3 random ``examples``.

    Empty generations are discarded and re-drawn; after ``max_attempts × size`` prompts the
    samples obtained so far are returned (never more than ``size``).
    """
    if not examples:
        raise ValueError("Expand needs at least one example text")
    if batch_size < 1:  # a batch of 0 would never spend the budget: an endless loop
        raise ValueError(f"Expand's batch size must be >= 1, got {batch_size}")
    out: list[str] = []
    budget = max_attempts * size
    with generator.sampling_session():  # batch after batch: a vLLM engine stays awake
        while len(out) < size and budget > 0:
            n = min(batch_size, size - len(out), budget)
            budget -= n
            picks = [rng.choice(len(examples), size=3, replace=len(examples) < 3) for _ in range(n)]
            prompts = [few_shot_prompt([examples[i] for i in p]) for p in picks]
            batch_params = SamplingParams(
                params.max_new_tokens, params.temperature, params.top_p, _seed(rng)
            )
            generated = generator.generate(prompts, batch_params, chat=False)
            out.extend(t for t in map(parse_generated, generated) if t)
    return out[:size]


class PrivateEvolution(Method):
    """Rounds of PE (one round = one PE iteration = one DP release); ``finish`` is the
    adapter's. State: the current population ``S_t`` and the DP seed set with scores."""

    models = ("generator", "embedder", "masked_filler")  # the filler varies; the generator writes

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        self.pe = PEConfig.from_config(config)
        self._sigma: dict[Any, float] = {}

    def num_rounds(self) -> int:
        return self.pe.iterations

    def noise_multiplier(self, ctx: MethodContext) -> float:
        """σ for T full-participation releases within the budget (solved once per budget)."""
        if ctx.privacy not in self._sigma:
            self._sigma[ctx.privacy] = ctx.noise_for(steps=self.pe.iterations, sample_rate=1.0)
        return self._sigma[ctx.privacy]

    def setup(self, ctx: MethodContext) -> dict[str, Any]:
        pool = eligible_public(ctx, self.pe.min_words)
        population = initial_population(pool, self.pe.population_size, ctx.rng(-1))
        return {"population": population, "seeds": {}}

    def round(self, ctx: MethodContext, state: dict[str, Any], round_index: int) -> dict:
        rng = ctx.rng(round_index)
        sigma = self.noise_multiplier(ctx)
        variation = Variation(ctx.profile, self.pe)
        population = state["population"]
        embeddings = lookahead_embeddings(
            population, ctx.profile.embedder(), variation, self.pe.lookahead, _seed(rng)
        )
        hist = dp_histogram(ctx, embeddings, self.pe, sigma, round_index)
        kept = threshold_histogram(hist, self.pe.threshold_std, sigma)
        chosen = resample(kept, self.pe.population_size, rng)
        ctx.diagnostics.write("pe_survivors", int((kept > 0).sum()), round_index)
        seeds = update_seeds(state["seeds"], population, hist, chosen)
        survivors = [population[i] for i in chosen]
        last = round_index == self.pe.iterations - 1
        next_population = survivors if last else variation(survivors, _seed(rng))
        return {"population": next_population, "seeds": seeds}
