"""Resource-adaptive DP federated controllable text generation with DP voting (paper 001).

Privacy: ``privacy.unit: client_sample`` — sample-level DP for each client separately
(paper 001 Definition 1, cross-silo). Clients are split into two disjoint groups, the strong
clients C_s (train + profile) and the weak clients C_r (vote + profile); the harness
accounts each group by basic composition over its phases, each phase at δ / 2 (a spec δ of
1/(N log N) is the paper's 1/(2N log N) per phase), and reports the worst group's ε
(:func:`benchmark.privacy.accountants.group_epsilons`). Budget split: ε_train = ε_vote =
(1 − ``profile_share``)·ε and ε_prof = ``profile_share``·ε, the paper's 8 → 6 + 2 and
4 → 3 + 1 at ``profile_share`` = ¼.

Algorithm 1, step by step (one harness round per stage, so a run resumes between stages):

- rounds 0 … R−1 — **stage 1, Alg. A.3**: each round calls ``pool.local_dp_finetune`` on
  the strong group: every strong client runs τ = ``local_steps`` local DP-SGD steps from
  θ^{r−1} (Poisson rate ``local_sample_rate``, per-sample clip ``clip_norm``, noise σ_s
  calibrated by the accountant to ε_train over R·τ steps at δ/2, SGD at γ = ``client_lr``,
  loss −log p_θ(x | c) with c = ``control_template`` filled with the sample's code). The
  training is harness code; this adapter sees only the mean delta Δ. Server step with
  ``server_optimizer``: ``sgd`` is θ ← θ + ηΔ (η = 1 is plain FedAvg); ``adam`` treats −Δ
  as a pseudo-gradient (FedAdam, β = (0.9, 0.999), ε = 1e-8). The last round's θ is kept.
- round R — **stage 2**: every client releases its code counts P̃_i with the analytic
  Gaussian (Balle & Wang) at ε_prof, δ/2 (``pool.local_gaussian``, sensitivity 1), the server
  gets P̃ = Σ P̃_i; **stage 3**: s_j = Round(s · max(P̃_j, 0) / Σ max(P̃, 0)) candidates per
  code (:func:`methods.ctg_refinement.samples_per_code`) sampled from p_θ(· | c^j) at
  ``temperature`` (top-k/top-p off), at most ``max_length`` tokens with the prompt.
- round R+1 — **stage 4, Alg. A.2**: the weak clients vote (``pool.local_gaussian``, each
  sample's K = ``votes_per_sample`` nearest same-code candidates, clipped to √K, analytic
  Gaussian at ε_vote, δ/2); ṽ = Σ ṽ_i.
- finish — **Alg. A.4** per code: ⌊r·|I^j|⌋ candidates without replacement ∝ max(ṽ, 0)
  (:func:`methods.ctg_refinement.sample_without_replacement`). The release is the labelled
  synthetic set (artifact kind ``labelled_texts``).

Variants, by params:

- ``finetune: false`` — **Pre.**: no stage 1; the candidates are the pretrained model's
  zero-shot generations from ``zero_shot_template`` (paper 001 §1.2's verbatim prompts are
  :data:`YELP_ZERO_SHOT` and :data:`PUBMED_ZERO_SHOT`);
- ``refinement: votes`` (the method), ``none`` (stage 4 skipped: ``num_synthetic`` samples
  are generated directly), ``uniform`` (Table A.14's control: s candidates, r·s kept
  uniformly at random, no vote release);
- ε = ∞ (``privacy.epsilon: .inf``): the same pipeline without noise.

Evaluation (the evaluator's, set in the spec's metrics): ``classification`` trains a
probe on the release and scores the real test texts (accuracy and macro-F1; with
``field: Business Category`` / ``Review Stars`` for Yelp's two tasks, ``field: Anatomy``
etc. for PubMed's per-MeSH tasks, on the builders' paper-001 code strings: yelp
``label=paper001``, pubmed ``label=mesh_indicators``); ``mauve`` with ``features:
conditional_lm`` (GPT-2 in ``paper``) and ``features: openai-community/gpt2-large``.

Choices the paper leaves open (and why):

- Control codes: ``codes`` in the params, else the distinct labels of the validation part
  (public by the paper's assumption that codes are predetermined and non-private); samples
  whose label is not a code count for nothing and vote for nothing.
- Strong clients: ``strong_clients: split`` takes the split's flags (a split built with
  ``strong_fraction``; with ``partition: label_subset`` the skewed clients are the strong
  ones, paper 001's non-IID setting); ``random`` draws a ``strong_fraction`` of the
  clients, at least one, with the run's seed (the IID setting; the paper does not say how
  C_s is chosen, and client sizes are private, so not by size). In Pre. nobody trains and
  every client is weak: all of them vote.
- s is the number of candidates and ``num_synthetic`` = r·s the final size (Table A.14:
  50,000 generated, 10,000 kept); without refinement ``num_synthetic`` are generated.
- Neighbouring relation: add/remove of one sample of one client (sensitivities 1 and √K);
  the DP-SGD phase uses the accountant's Poisson-subsampled Gaussian (paper: Opacus).
- The DP-SGD clip norm (not stated; 1.0), the local optimiser (Alg. A.3 prints SGD; used
  as printed), the server optimiser and η (the literal θ ← θ + ηΔ with η = 1e-3 would
  shrink the update 1000×; ``paper`` uses FedAdam at η = 1e-3), and the DP model
  selection (not stated: the last round is kept, no private data is spent on selection).
- ``local_sample_rate`` is one rate for every client (the ledger needs one): ``paper`` is
  256/15,000, the batch over the Yelp IID client size.
- Distance for the KNN votes: L2 between the encoder's unit-norm embeddings (the same
  ranking as cosine); negative noisy votes and counts are clipped to 0 (not stated); a
  profile with no positive count shares the candidates out uniformly; empty generations
  are dropped.
- ε = ∞ runs with the same hyperparameters as the DP runs (a controlled comparison), where
  the paper tunes its non-DP runs apart (γ 5e-6, η 5e-5, R 100, batch 32) and keeps the
  checkpoint of least evaluation loss.
- The uniform control keeps r·s of all candidates uniformly (Table A.14), not r per code.
- DP-SGD normalises by a public expected batch size ``local_batch_size`` (paper: 256),
  never by q·|D_i|, which is private.
- At paper scale the vote rows are dense (|D_i| × s floats per client: 15,000 × 50,000
  for Yelp, 3 GB in float32); a per-code sparse release is future work.
- The generator is the profile's conditional LM, which the harness's local DP-SGD trains:
  GPT-2 in ``paper`` (the Yelp generator; PubMed's GPT-2-large is a profile setting),
  SmolLM2-135M-Instruct in ``cpu`` (the only pretrained causal LM that ships in a package,
  about GPT-2's size), the random-init on-device LM in ``tiny``. θ0 is that pretrained
  checkpoint, as in the paper (no public fine-tuning first).
- ``delta_rule``: ``ln`` or ``log10`` makes the run refuse a spec δ other than
  1/(N log N) for the pool's N clients (the paper does not give the base); ``spec`` takes
  the spec's δ as it is. Either way the rule is recorded with the params.
- NER (PubMed domain adaptation) is left out: the paper does not identify its dataset.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from benchmark.api import (
    LABEL,
    Artifact,
    Embedder,
    Method,
    MethodContext,
    SpecError,
    analytic_gaussian_sigma,
    ancestral_sample,
    control_prompt,
    flat_params,
    load_flat,
    seeded,
)
from methods.ctg_refinement import (
    CodeCounts,
    KNNVotes,
    code_index,
    sample_without_replacement,
    samples_per_code,
)

YELP_ZERO_SHOT = (
    "Please generate a review about business category {label_1} with rating star {label_2}:\n\n"
)
PUBMED_ZERO_SHOT = (
    "Please generate a scientific abstract on a biomedical study that covers topics "
    "{covered} but does not cover topics {not_covered}:\n\n"
)
GENERIC_ZERO_SHOT = "Please generate a text about {label}:\n\n"
STRONG_GROUP, WEAK_GROUP = "strong", "weak"
REFINEMENTS = ("votes", "uniform", "none")
SERVER_OPTIMIZERS = ("sgd", "adam")
DELTA_RULES = {"spec": None, "ln": math.log, "log10": math.log10}
# FedAdam's β and adaptivity τ = 1e-3 (Reddi et al. 2021's usual range; with Adam's 1e-8 a
# noisy delta moves every weight by ±η in the first round)
ADAM_BETAS, ADAM_EPS = (0.9, 0.999), 1e-3

_COMMON = {
    "codes": None,
    "control_template": "{label}\n",
    "zero_shot_template": GENERIC_ZERO_SHOT,
    "finetune": True,
    "refinement": "votes",
    "strong_clients": "random",
    "strong_fraction": 0.1,
    "profile_share": 0.25,
    "clip_norm": 1.0,
    "temperature": 1.0,
    "sampling_rate": 0.2,
    "votes_per_sample": 5,
    "vote_encoder": "profile",
    "delta_rule": "spec",
}
_CONFIGS: dict[str, dict[str, Any]] = {
    # Yelp, DP fine-tuning (paper 001 §1.3): R = 200, τ = 50, batch 256 of 15,000, γ = 5e-4,
    # η = 1e-3, length 128, 10,000 final samples, r = 0.2, K = 5 (inferred), stsb-roberta.
    "paper": {
        "rounds": 200,
        "local_steps": 50,
        "local_sample_rate": 256 / 15_000,
        "local_batch_size": 256,
        "client_lr": 5e-4,
        "server_optimizer": "adam",
        "server_lr": 1e-3,
        "max_length": 128,
        "num_synthetic": 10_000,
        "generate_batch_size": 64,
        "vote_encoder": "sentence-transformers/stsb-roberta-base-v2",
        "zero_shot_template": YELP_ZERO_SHOT,
        "delta_rule": "ln",
    },
    # cpu: sized for per-sample backwards on one core: docs/measurements/working-scale.md#fed_ctg
    # γ = 1e-3 keeps the DP noise added to a weight, σ·γ/B·√(R·τ), near 1e-3 (σ ≈ 1.1,
    # B = 11), well under the weights' scale: a larger γ buys no signal at this batch size.
    "cpu": {
        "rounds": 2,
        "local_steps": 5,
        "local_sample_rate": 0.5,
        "local_batch_size": 11,  # 0.5 × the ~22 samples of the cpu split's IID clients
        "client_lr": 1e-3,
        "server_optimizer": "sgd",
        "server_lr": 1.0,
        "max_length": 64,
        "num_synthetic": 100,
        "generate_batch_size": 32,
    },
    "tiny": {
        "rounds": 1,
        "local_steps": 2,
        "local_sample_rate": 0.5,
        "local_batch_size": 2,
        "client_lr": 0.05,
        "server_optimizer": "sgd",
        "server_lr": 1.0,
        "max_length": 32,
        "num_synthetic": 8,
        "generate_batch_size": 16,
    },
}


def generate_for_prompt(
    model: Any,
    tokenizer: Any,
    prompt: str,
    n: int,
    *,
    seed: int,
    max_length: int,
    temperature: float,
    batch_size: int,
) -> list[str]:
    """``n`` samples of p_θ(· | prompt) (ancestral sampling, top-k/top-p off), each at most
    ``max_length`` tokens with the prompt; empty ones dropped."""
    prompt_ids = tokenizer(prompt)["input_ids"]
    new_tokens = max_length - len(prompt_ids)
    if n <= 0 or new_tokens < 1:
        return []
    eos = tokenizer.eos_token_id
    texts: list[str] = []
    with seeded(seed), torch.inference_mode():
        for begin in range(0, n, batch_size):
            ids = torch.tensor([prompt_ids] * min(batch_size, n - begin), device=model.device)
            out = ancestral_sample(model, ids, new_tokens, temperature, eos)
            texts += tokenizer.batch_decode(out[:, len(prompt_ids) :], skip_special_tokens=True)
    return [t.strip() for t in texts if t.strip()]


def server_step(
    params: torch.Tensor, delta: torch.Tensor, moments: dict[str, Any], optimizer: str, lr: float
) -> torch.Tensor:
    """θ ← θ + ηΔ (``sgd``) or one FedAdam step on the pseudo-gradient −Δ (``adam``)."""
    if optimizer == "sgd":
        return params + lr * delta
    grad = -delta
    step = moments.get("step", 0) + 1
    m = ADAM_BETAS[0] * moments.get("m", torch.zeros_like(grad)) + (1 - ADAM_BETAS[0]) * grad
    v = ADAM_BETAS[1] * moments.get("v", torch.zeros_like(grad)) + (1 - ADAM_BETAS[1]) * grad**2
    moments.update(step=step, m=m, v=v)
    m_hat, v_hat = m / (1 - ADAM_BETAS[0] ** step), v / (1 - ADAM_BETAS[1] ** step)
    return params - lr * m_hat / (v_hat.sqrt() + ADAM_EPS)


class FedCTG(Method):
    name = "fed_ctg"
    artifact_kind = "labelled_texts"
    privacy_units = ("client_sample",)
    models = ("conditional_lm", "embedder")
    configs = {profile: {**_COMMON, **values} for profile, values in _CONFIGS.items()}

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        self._voter: Embedder | None = None  # the vote encoder, loaded once per process
        for key, allowed in (
            ("refinement", REFINEMENTS),
            ("server_optimizer", SERVER_OPTIMIZERS),
            ("delta_rule", tuple(DELTA_RULES)),
            ("strong_clients", ("random", "split")),
        ):
            if config[key] not in allowed:
                raise SpecError(f"method.params.{key}: one of {list(allowed)}, got {config[key]!r}")
        if not 0 < config["profile_share"] < 1 or not 0 < config["sampling_rate"] <= 1:
            raise SpecError("method.params: profile_share in (0, 1) and sampling_rate in (0, 1]")

    def num_rounds(self) -> int:
        return self._train_rounds() + 2

    def _train_rounds(self) -> int:
        return self.config["rounds"] if self.config["finetune"] else 0

    # -- budget -----------------------------------------------------------------------

    def _phase_delta(self, ctx: MethodContext) -> float:
        """δ of one phase: every client is in two phases (train or vote, and profile)."""
        rule = DELTA_RULES[self.config["delta_rule"]]
        if rule is not None:
            n = ctx.pool.num_clients
            expected = 1 / (n * rule(n))
            if not math.isclose(ctx.privacy.delta, expected, rel_tol=1e-3):
                raise SpecError(
                    f"privacy.delta: delta_rule {self.config['delta_rule']!r} needs "
                    f"1/(N log N) = {expected:.6g} for N = {n} clients, got {ctx.privacy.delta}"
                )
        return ctx.privacy.delta / 2

    def _epsilon(self, ctx: MethodContext, phase: str) -> float:
        share = self.config["profile_share"]
        return ctx.privacy.epsilon * (share if phase == "profile" else 1 - share)

    def _gaussian_sigma(self, ctx: MethodContext, phase: str) -> float:
        """Analytic-Gaussian noise multiplier of one full-participation release."""
        eps = self._epsilon(ctx, phase)
        return 0.0 if math.isinf(eps) else analytic_gaussian_sigma(eps, self._phase_delta(ctx))

    # -- stages -----------------------------------------------------------------------

    def setup(self, ctx: MethodContext) -> Any:
        codes = self.config["codes"] or sorted(
            {str(r[LABEL]) for r in ctx.validation if r.get(LABEL) not in (None, "")}
        )
        if not codes:
            raise SpecError(
                "fed_ctg needs control codes: set method.params.codes or label the split"
            )
        n = ctx.pool.num_clients
        strong = self._strong_clients(ctx) if self._train_rounds() else []
        weak = sorted(set(range(n)) - set(strong))
        if not weak:
            raise SpecError(f"fed_ctg: {len(strong)} strong clients leave no weak client of {n}")
        if strong:
            ctx.pool.define_group(STRONG_GROUP, strong)
        ctx.pool.define_group(WEAK_GROUP, weak)
        if self.config["refinement"] == "votes":
            self._vote_embedder(ctx)  # loads now, not after hours of training
        model = ctx.profile.conditional_lm().new_model(0)
        state = {"codes": codes, "params": flat_params(model), "moments": {}}
        if self._train_rounds():  # one calibration for all R·τ steps
            state["train_sigma"] = ctx.noise_for(
                steps=self.config["rounds"] * self.config["local_steps"],
                sample_rate=self.config["local_sample_rate"],
                epsilon=self._epsilon(ctx, "train"),
                delta=self._phase_delta(ctx),
            )
        return state

    def _strong_clients(self, ctx: MethodContext) -> list[int]:
        """C_s: the split's flags (``split``: its non-IID strong clients hold the skewed
        data), or a ``strong_fraction`` of the clients, at least one, drawn with the seed."""
        if self.config["strong_clients"] == "split":
            flagged = ctx.pool.strong_clients()
            if not flagged:
                raise SpecError(
                    "method.params.strong_clients: split, but the split flags no strong "
                    "client (build it with strong_fraction > 0)"
                )
            return sorted(flagged)
        n = ctx.pool.num_clients
        order = ctx.rng(0, 1).permutation(n)
        return sorted(int(c) for c in order[: max(1, round(self.config["strong_fraction"] * n))])

    def round(self, ctx: MethodContext, state: Any, round_index: int) -> Any:
        if round_index < self._train_rounds():
            return self._train(ctx, state)
        if round_index == self._train_rounds():
            return self._profile_and_generate(ctx, state, round_index)
        return self._vote(ctx, state) if self.config["refinement"] == "votes" else state

    def _model(self, ctx: MethodContext, params: torch.Tensor) -> Any:
        model = ctx.profile.conditional_lm().new_model(0)
        load_flat(model, params)
        return model.eval()

    def _train(self, ctx: MethodContext, state: dict[str, Any]) -> dict[str, Any]:
        cfg = self.config
        model = self._model(ctx, state["params"])
        delta = ctx.pool.local_dp_finetune(
            dict(model.state_dict()),
            prompt_template=cfg["control_template"],
            groups=[STRONG_GROUP],
            noise_multiplier=state["train_sigma"],
            clip_norm=cfg["clip_norm"],
            sample_rate=cfg["local_sample_rate"],
            batch_size=cfg["local_batch_size"],
            steps=cfg["local_steps"],
            lr=cfg["client_lr"],
            max_length=cfg["max_length"],
            label="train",
        )
        flat_delta = torch.cat(
            [delta[name].reshape(-1).float() for name, _ in model.named_parameters()]
        )
        moments = dict(state["moments"])
        params = server_step(
            state["params"], flat_delta, moments, cfg["server_optimizer"], cfg["server_lr"]
        )
        return {**state, "params": params, "moments": moments}

    def _profile_and_generate(
        self, ctx: MethodContext, state: dict[str, Any], round_index: int
    ) -> dict[str, Any]:
        cfg, codes = self.config, state["codes"]
        groups = [STRONG_GROUP, WEAK_GROUP] if self._train_rounds() else [WEAK_GROUP]
        profile = ctx.pool.local_gaussian(
            CodeCounts(),
            {"codes": codes},
            dim=len(codes),
            clip_norm=1.0,
            noise_multiplier=self._gaussian_sigma(ctx, "profile"),
            groups=groups,
            label="profile",
        ).noisy_sum
        candidates = cfg["num_synthetic"]
        if cfg["refinement"] != "none":
            candidates = round(cfg["num_synthetic"] / cfg["sampling_rate"])
        model = self._model(ctx, state["params"])
        template = cfg["control_template"] if cfg["finetune"] else cfg["zero_shot_template"]
        texts, labels = [], []
        for j, (code, count) in enumerate(
            zip(codes, samples_per_code(profile, candidates), strict=True)
        ):
            generated = generate_for_prompt(
                model,
                ctx.profile.conditional_lm().tokenizer,
                control_prompt(template, code),
                int(count),
                seed=int(ctx.rng(round_index, 2 + j).integers(2**31)),
                max_length=cfg["max_length"],
                temperature=cfg["temperature"],
                batch_size=cfg["generate_batch_size"],
            )
            texts += generated
            labels += [code] * len(generated)
        return {**state, "texts": texts, "labels": labels}

    @classmethod
    def hub_ids(cls, config: dict[str, Any]) -> tuple[str, ...]:
        """The vote encoder, when the config names one by hub id (paper: stsb-roberta)."""
        encoder = config["vote_encoder"]
        return () if encoder == "profile" else (encoder,)

    def _vote_embedder(self, ctx: MethodContext) -> Embedder:
        if self._voter is None:
            name = self.config["vote_encoder"]
            if name == "profile":
                self._voter = ctx.profile.embedder()
            else:
                from sentence_transformers import SentenceTransformer

                from benchmark.api import SentenceTransformerEmbedder, from_hub

                model = from_hub(SentenceTransformer, name, "main")
                self._voter = SentenceTransformerEmbedder(model, name)
        return self._voter

    def _vote(self, ctx: MethodContext, state: dict[str, Any]) -> dict[str, Any]:
        codes, texts = state["codes"], state["texts"]
        k = self.config["votes_per_sample"]
        embedder = self._vote_embedder(ctx)
        votes = ctx.pool.local_gaussian(
            KNNVotes(embedder),
            {
                "embeddings": np.asarray(embedder.embed(texts), dtype=np.float32),
                "candidate_codes": np.array([code_index(codes, c) for c in state["labels"]]),
                "codes": codes,
                "k": k,
            },
            dim=len(texts),
            clip_norm=math.sqrt(k),
            noise_multiplier=self._gaussian_sigma(ctx, "vote"),
            groups=[WEAK_GROUP],
            label="vote",
        ).noisy_sum
        return {**state, "votes": votes}

    def finish(self, ctx: MethodContext, state: Any) -> Artifact:
        texts, labels = state["texts"], state["labels"]
        refinement = self.config["refinement"]
        if refinement == "none":
            return Artifact(kind=self.artifact_kind, texts=texts, labels=labels)
        rng, rate = ctx.rng(self.num_rounds()), self.config["sampling_rate"]
        if refinement == "uniform":  # Table A.14: r·s of all candidates, uniformly
            kept = sorted(sample_without_replacement(np.ones(len(texts)), rate, rng).tolist())
        else:
            kept, by_code = [], np.asarray(labels, dtype=object)
            for code in state["codes"]:
                positions = np.flatnonzero(by_code == code)
                chosen = sample_without_replacement(state["votes"][positions], rate, rng)
                kept += [int(positions[i]) for i in chosen]
            kept.sort()
        return Artifact(
            kind=self.artifact_kind,
            texts=[texts[i] for i in kept],
            labels=[labels[i] for i in kept],
        )
