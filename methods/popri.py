"""POPri (paper 000): private client feedback as preference pairs, DPO on the LLM.

One harness round = one iteration ``t`` of paper 000 Algorithm 1 = one DP release:

- Alg. 1 l. 4 — clients embed their own samples with the profile's embedder Γ, once, in
  their client-side memo (:class:`methods.popri_scoring.SimilarityScorer`).
- l. 9-12 — ``num_prompts`` (K) prompts, each three random public texts in the few-shot
  structure of paper 000 Fig. 5 / paper 004 Fig. 3
  (:func:`methods.private_evolution.few_shot_prompt`), each sampled ``samples_per_prompt``
  (J) times from the current policy Ψ_t; the generated sample is the text before the next
  sample heading (:func:`methods.private_evolution.parse_generated`).
- l. 13-20 — the server embeds the K·J samples and broadcasts the embeddings; every sampled
  client scores all of them by mean cosine similarity to its own samples (Algorithm 4, one
  float32 matrix product for all clients); ``ctx.pool.aggregate`` clips each client's score
  vector to L2 norm 1 (Alg. 4 l. 3), sums, adds N(0, σ²) once (the clients' N(0, σ²/L)
  shares of l. 17 sum to the same noise) and records the release. Full participation, or
  Poisson sampling at ``sample_rate`` q for the partial-participation settings (Table 3).
- l. 21-26 — per prompt, rank the J samples by noisy score: chosen = rank 1, rejected = rank
  ``rejected_rank`` (ℓ) (:func:`methods.popri_scoring.preference_indices`). Dividing the
  sum by L (l. 20) does not change any ranking, so the noisy sum is used directly.
- l. 27 — DPO (trl ``DPOTrainer``, sigmoid loss, β = ``dpo_beta``) with LoRA (peft, rank
  ``lora_r``, α = ``lora_alpha``, every linear projection) on the K pairs, ``epochs`` epochs,
  AdamW with a cosine schedule from ``lr`` down to ``min_lr``. The reference policy Ψ_ref
  is the public checkpoint (the LoRA adapter disabled) in every round, as in paper 000 §3.1,
  not the round's starting policy Ψ_t (trl's default for an adapter it did not create).
- App. B.1 — checkpoint selection: after each DPO epoch, ``fid_samples`` fresh samples are
  generated (same prompts and seed for every checkpoint of a round) and their FID against
  the validation texts is computed in Γ's space (:mod:`benchmark.evaluation.fid`); the best
  epoch is the round's checkpoint and the start of the next round.
- l. 30 — ``finish`` generates ``num_synthetic`` samples (fresh 3-shot prompts, empty
  generations re-drawn, :func:`methods.private_evolution.expand`) from the checkpoint with
  the lowest validation FID over all rounds (paper 000 Fig. 4 / §5.2 / App. E.3: later
  rounds over-fit, "the model that produces the lowest overall FID is the best synthetic
  data generation model"). Artifact kind ``texts``.

Privacy: σ = ``ctx.noise_for(steps=rounds, sample_rate=q)`` — ``rounds`` subsampled Gaussian
releases of sensitivity 1 (paper 000 §3.1). With the harness's RDP accountant at δ = 3e-6 this
gives σ = 19.25 / 3.33 for ε = 1 / 7, 20 rounds, q = 1 (paper: 19.3 / 3.35), and for ε = 1
over 50 rounds σ = 3.38 / 15.38 / 30.44 at q = 0.1 / 0.5 / 1 (Table 3: 3.4 / 15.5 / 30.6, so
its partial-participation runs have 50 rounds). Everything after the release is
post-processing. The FID selection reads only the split's validation clients (held out from
training, given to methods for model selection); the test clients are never read. The
reference code's "recovery rate" (how often the noisy ranking matches the noise-free one)
needs noise-free scores, which the pool never releases in a private run, so it is not
computed.

Choices the paper leaves open (and where the values come from):
- Scores follow Algorithm 4 exactly in ``paper`` and ``cpu``: mean cosine similarity, no
  standardisation. The reference code z-scores each client's vector before clipping (the
  paper's algorithm does not); ``standardize_scores: true`` does that, client side and
  before clipping, so at no privacy cost (:mod:`methods.popri_scoring`).
- Partial participation is Poisson sampling at rate q = clients per round / N (Table 3 lists
  1,000 and 5,000 of 10,000 clients), which is what the accountant analyses; the paper
  samples a fixed number of clients.
- DPO β = 0.01 (the paper gives no value for τ) and the 8e-7 → 3e-7 cosine schedule are the
  reference configuration of the paper era; 2 epochs per round and batch size 24 are App. B.1
  (6 accumulation steps of 4, as in the reference). LoRA rank 4, α = 8 on every linear
  projection (peft ``all-linear``: q/k/v/o/gate/up/down on LLaMA) are §3.1 / App. B.1; the
  reference code hard-codes r = 16, α = 16 instead. LoRA dropout 0; no warm-up.
- ``fid_samples`` = 1,800 in ``paper`` (as many as the round's prompts): fresh 3-shot
  public prompts drawn once per round, the same for every checkpoint of that round, so
  checkpoints are compared on equal prompts; ``num_synthetic`` = 1,000,000 is App. B.1's
  downstream set.
- Samples are at most ``max_new_tokens`` = 64 generator tokens (App. D: sequence length 64),
  temperature and top-p 1.0; the generator is prompted as a plain LM (no chat template),
  like the paper's base LLaMA-3-8B. Prompts longer than the generator's context are cut from
  the left, the same way for sampling and for DPO. The released samples use
  ``release_temperature`` / ``release_top_p`` (1.0 / 1.0 as the paper; post-processing a
  suite may tune on validation, :mod:`methods.release_sampling`).
- Empty training samples are kept (they are scored and may be paired like any other);
  the final set re-draws empty generations.
- The untrained public model is not a selection candidate: only post-DPO checkpoints are.

State (picklable, small): the LoRA weights of the current policy and of the best checkpoint
(CPU tensors), the best FID and its round/epoch, and per-round FIDs and DPO losses. The
profile's generator is modified only inside a round (LoRA injected, then unloaded), so the
cached model is unchanged between rounds and after the run. Sampling goes through
``generator.adapted``: with transformers the adapter is merged into the weights (the
reference code also merges before generating) and the exact base weights restored
afterwards; with vLLM the adapter is passed to the engine as a LoRA request, and the engine
sleeps while DPO trains (:mod:`benchmark.profiles.vllm_generator`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import torch

from benchmark.api import (
    TEXT,
    Artifact,
    Generator,
    Method,
    MethodContext,
    SamplingParams,
    context_length,
    fid_from_features,
    shuffled_subset,
)
from methods.lora import lora_config, trainable_flags_kept
from methods.popri_scoring import SimilarityScorer, preference_indices
from methods.private_evolution import eligible_public, expand, few_shot_prompt, parse_generated
from methods.release_sampling import RELEASE_SAMPLING, release_sampling

CLIP_NORM = 1.0  # Algorithm 4, l. 3: each client's score vector has L2 norm <= 1
EXAMPLES_PER_PROMPT = 3  # paper 000 Fig. 5: three public samples, the 4th is generated

# Streams of ctx.rng(round, stream).
_PROMPTS, _SAMPLING, _DPO, _FID = range(4)


@dataclass(frozen=True)
class POPriConfig:
    rounds: int  # T
    num_prompts: int  # K
    samples_per_prompt: int  # J
    rejected_rank: int  # ℓ (1-based; chosen is rank 1)
    sample_rate: float  # q (1.0 = full participation)
    max_new_tokens: int
    temperature: float
    top_p: float
    dpo_beta: float
    lr: float
    min_lr: float
    epochs: int  # DPO epochs per round (one checkpoint each)
    batch_size: int
    grad_accum_steps: int
    lora_r: int
    lora_alpha: int
    fid_samples: int
    fid_validation_max: int | None  # validation texts used for FID (None = all)
    num_synthetic: int
    generate_batch_size: int  # prompts per generate call in finish
    standardize_scores: bool  # client-side z-scoring before clipping (reference code)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> POPriConfig:
        return cls(**{f.name: config[f.name] for f in fields(cls)})

    def __post_init__(self) -> None:
        positive = ("rounds", "num_prompts", "epochs", "batch_size", "grad_accum_steps", "lora_r")
        for name in positive + ("num_synthetic", "max_new_tokens", "generate_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"popri: {name} must be >= 1, got {getattr(self, name)}")
        if not 2 <= self.rejected_rank <= self.samples_per_prompt:
            raise ValueError(
                f"popri: rejected_rank must be in [2, samples_per_prompt={self.samples_per_prompt}]"
                f", got {self.rejected_rank}"
            )
        if not 0 < self.sample_rate <= 1:
            raise ValueError(f"popri: sample_rate must be in (0, 1], got {self.sample_rate}")
        if self.batch_size % self.grad_accum_steps:
            raise ValueError("popri: batch_size must be a multiple of grad_accum_steps")
        if self.fid_samples < 2:
            raise ValueError("popri: fid_samples must be >= 2 (FID needs a covariance)")


_PAPER = {
    "rounds": 20,
    "num_prompts": 1800,
    "samples_per_prompt": 10,
    "rejected_rank": 5,
    "sample_rate": 1.0,
    "max_new_tokens": 64,
    "temperature": 1.0,
    "top_p": 1.0,
    "dpo_beta": 0.01,
    "lr": 8e-7,
    "min_lr": 3e-7,
    "epochs": 2,
    "batch_size": 24,
    "grad_accum_steps": 6,
    "lora_r": 4,
    "lora_alpha": 8,
    "fid_samples": 1800,
    "fid_validation_max": None,
    "num_synthetic": 1_000_000,
    "generate_batch_size": 256,
    # Algorithm 4 as printed: no per-client standardisation. The paper is the specification
    # and its Alg. 4 / privacy analysis describe raw cosine scores; the reference code's
    # z-scoring is an option (see popri_scoring): docs/measurements/working-scale.md#popri
    "standardize_scores": False,
    **RELEASE_SAMPLING,  # the released samples' (temperature, top-p); the rounds' are above
}
# cpu: sized for 2 shared cores, where DPO dominates (one epoch per round, not App. B.1's two;
# J and ℓ = 5 as the paper; Alg. 4 scores): docs/measurements/working-scale.md#popri
# The learning rate is large enough for a few LoRA steps per round to move the policy (8e-7
# is tuned for thousands of steps on LLaMA-3-8B).
_CPU = {
    **_PAPER,
    "rounds": 3,
    "num_prompts": 24,
    "samples_per_prompt": 10,
    "rejected_rank": 5,
    "lr": 1e-3,
    "min_lr": 1e-4,
    "epochs": 1,
    "batch_size": 4,
    "grad_accum_steps": 1,
    "fid_samples": 128,
    "fid_validation_max": 500,
    "num_synthetic": 1000,
    "generate_batch_size": 32,
}
_TINY = {
    **_CPU,
    "rounds": 2,
    "num_prompts": 3,
    "samples_per_prompt": 4,
    "rejected_rank": 3,
    "epochs": 2,
    "max_new_tokens": 12,
    "fid_samples": 6,
    "fid_validation_max": 64,
    "num_synthetic": 8,
    "generate_batch_size": 8,
}

Adapter = dict[str, torch.Tensor]


def _seed(rng: np.random.Generator) -> int:
    return int(rng.integers(2**31 - 1))


def fit_prompt(tokenizer: Any, prompt: str, max_tokens: int) -> str:
    """``prompt`` cut from the left to at most ``max_tokens`` tokens (unchanged if it fits)."""
    ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    if len(ids) <= max_tokens:
        return prompt
    return tokenizer.decode(ids[-max_tokens:])


def sample_round(
    generator: Generator,
    public: list[str],
    config: POPriConfig,
    rng: np.random.Generator,
    seed: int,
) -> tuple[list[str], list[str]]:
    """Alg. 1 l. 9-12: K prompts and J samples of each; sample ``k*J + j`` answers prompt k."""
    room = generator.max_positions - config.max_new_tokens
    prompts = []
    for _ in range(config.num_prompts):
        picks = rng.choice(
            len(public), EXAMPLES_PER_PROMPT, replace=len(public) < EXAMPLES_PER_PROMPT
        )
        prompt = few_shot_prompt([public[i] for i in picks])
        prompts.append(fit_prompt(generator.tokenizer, prompt, room))
    repeated = [p for p in prompts for _ in range(config.samples_per_prompt)]
    params = SamplingParams(config.max_new_tokens, config.temperature, config.top_p, seed)
    samples = [parse_generated(t) for t in generator.generate(repeated, params, chat=False)]
    return prompts, samples


def private_scores(
    ctx: MethodContext,
    synthetic_embeddings: np.ndarray,
    noise_multiplier: float,
    sample_rate: float,
    round_index: int,
    standardize: bool = False,
) -> np.ndarray:
    """Alg. 1 l. 13-20: the clipped, noised sum of the sampled clients' score vectors."""
    aggregate = ctx.pool.aggregate(
        SimilarityScorer(ctx.profile.embedder(), standardize),
        np.asarray(synthetic_embeddings, dtype=np.float32),
        dim=len(synthetic_embeddings),
        clip_norm=CLIP_NORM,
        noise_multiplier=noise_multiplier,
        sample_rate=sample_rate,
        label=f"popri/round{round_index}/scores",
        batched=True,
    )
    return aggregate.noisy_sum


def preference_pairs(
    prompts: list[str], samples: list[str], scores: np.ndarray, rejected_rank: int
) -> list[dict[str, str]]:
    """Alg. 1 l. 21-26: one ``{prompt, chosen, rejected}`` pair per prompt."""
    per_prompt = len(samples) // len(prompts)
    chosen, rejected = preference_indices(scores, len(prompts), per_prompt, rejected_rank)
    return [
        {"prompt": p, "chosen": samples[c], "rejected": samples[r]}
        for p, c, r in zip(prompts, chosen, rejected, strict=True)
    ]


@contextmanager
def lora_policy(
    generator: Generator, config: POPriConfig, adapter: Adapter | None
) -> Iterator[Any]:
    """The generator's model with a LoRA adapter (weights ``adapter``, or fresh) injected in
    place; yields the peft model. On exit the adapter is unloaded and the base model's
    mode, cache setting and ``requires_grad`` flags (peft freezes the base) restored, so the
    profile's cached generator is left unchanged."""
    from peft import get_peft_model, set_peft_model_state_dict

    base = generator.model
    use_cache = getattr(base.config, "use_cache", None)
    with trainable_flags_kept(base):
        model = get_peft_model(base, lora_config(config.lora_r, config.lora_alpha))
        try:
            if adapter is not None:
                set_peft_model_state_dict(model, adapter)
            yield model
        finally:
            model.unload()
            generator.model = base
            base.eval()
            if use_cache is not None:
                base.config.use_cache = use_cache


def adapter_weights(model: Any) -> Adapter:
    """The LoRA weights of a peft model, as detached CPU tensors."""
    from peft import get_peft_model_state_dict

    return {k: v.detach().to("cpu", copy=True) for k, v in get_peft_model_state_dict(model).items()}


@contextmanager
def quiet_datasets() -> Iterator[None]:
    """No ``datasets`` progress bars inside (trl maps the pairs several times per round)."""
    import datasets

    was_disabled = datasets.are_progress_bars_disabled()
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        if not was_disabled:
            datasets.enable_progress_bars()


def train_dpo(
    model: Any,
    tokenizer: Any,
    pairs: list[dict[str, str]],
    config: POPriConfig,
    output_dir: str,
    seed: int,
) -> tuple[list[Adapter], float]:
    """Alg. 1 l. 27: DPO of the LoRA policy on ``pairs``; the adapter after every epoch and
    the mean training loss."""
    from datasets import Dataset
    from transformers import PrinterCallback, TrainerCallback
    from trl import DPOConfig, DPOTrainer

    snapshots: list[Adapter] = []
    use_cache = getattr(model.config, "use_cache", None)  # before the trainer turns it off

    class EpochSnapshots(TrainerCallback):
        def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            snapshots.append(adapter_weights(model))

    on_gpu = next(model.parameters()).device.type == "cuda"
    per_device = config.batch_size // config.grad_accum_steps
    args = DPOConfig(
        output_dir=output_dir,
        use_cpu=not on_gpu,
        bf16=on_gpu and torch.cuda.is_bf16_supported(),
        activation_checkpointing=on_gpu,
        report_to=[],
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
        beta=config.dpo_beta,
        learning_rate=config.lr,
        lr_scheduler_type="cosine_with_min_lr",
        lr_scheduler_kwargs={"min_lr": config.min_lr},
        warmup_steps=0,
        num_train_epochs=config.epochs,
        per_device_train_batch_size=min(per_device, len(pairs)),
        gradient_accumulation_steps=config.grad_accum_steps,
        max_length=context_length(model),
        seed=seed,
        data_seed=seed,
    )
    with quiet_datasets():
        trainer = DPOTrainer(
            model=model,
            ref_model=None,
            args=args,
            train_dataset=Dataset.from_list(pairs),
            processing_class=tokenizer,
            callbacks=[EpochSnapshots()],
        )
    # Given a PeftModel and no ref_model, trl copies the current adapter into a frozen "ref"
    # adapter and scores the reference with it: from round 2 on that is Ψ_t, not Ψ_ref. With
    # no "ref" adapter trl scores the reference with the adapters disabled: the public model.
    if "ref" in model.peft_config:
        model.delete_adapter("ref")
    trainer.remove_callback(PrinterCallback)  # one log line per round is noise in a run
    try:
        result = trainer.train()
    finally:  # the trainer turns the KV cache off; sampling without it is many times slower
        if use_cache is not None:
            model.config.use_cache = use_cache
        model.eval()
    return snapshots, float(result.training_loss)


class POPri(Method):
    """Paper 000 Algorithm 1 (federated, user-level DP); see the module docstring."""

    name = "popri"
    artifact_kind = "texts"
    privacy_units = ("user",)
    models = ("generator", "embedder")
    configs = {"paper": _PAPER, "cpu": _CPU, "tiny": _TINY}
    post_processing = tuple(RELEASE_SAMPLING)  # read in finish only

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        self.popri = POPriConfig.from_config(config)
        self._sigma: float | None = None
        self._validation: np.ndarray | None = None

    def num_rounds(self) -> int:
        return self.popri.rounds

    def noise_multiplier(self, ctx: MethodContext) -> float:
        if self._sigma is None:
            self._sigma = ctx.noise_for(steps=self.popri.rounds, sample_rate=self.popri.sample_rate)
        return self._sigma

    def validation_features(self, ctx: MethodContext) -> np.ndarray:
        """Γ-embeddings of the validation texts FID compares against (computed once)."""
        if self._validation is None:
            texts = shuffled_subset(
                [r[TEXT] for r in ctx.validation], self.popri.fid_validation_max, ctx.seed
            )
            if len(texts) < 2:
                raise ValueError("popri selects checkpoints by FID and needs >= 2 validation texts")
            self._validation = ctx.profile.embedder().embed(texts)
        return self._validation

    def setup(self, ctx: MethodContext) -> dict[str, Any]:
        return {"adapter": None, "best": None, "history": []}

    def _fid(self, ctx: MethodContext, generator: Generator, round_index: int) -> float:
        """Validation FID of ``fid_samples`` generations (same prompts/seeds per round)."""
        rng = ctx.rng(round_index, _FID)
        params = SamplingParams(self.popri.max_new_tokens, self.popri.temperature, self.popri.top_p)
        public = eligible_public(ctx, 1)
        texts = expand(
            generator, public, self.popri.fid_samples, params, self.popri.generate_batch_size, rng
        )
        if len(texts) < 2:
            return math.inf
        return fid_from_features(ctx.profile.embedder().embed(texts), self.validation_features(ctx))

    def round(self, ctx: MethodContext, state: dict[str, Any], round_index: int) -> dict[str, Any]:
        from peft import set_peft_model_state_dict

        cfg = self.popri
        generator = ctx.profile.generator()
        public = eligible_public(ctx, 1)
        sigma = self.noise_multiplier(ctx)
        with lora_policy(generator, cfg, state["adapter"]) as model:
            with generator.adapted(model):
                prompts, samples = sample_round(
                    generator,
                    public,
                    cfg,
                    ctx.rng(round_index, _PROMPTS),
                    _seed(ctx.rng(round_index, _SAMPLING)),
                )
            embeddings = ctx.profile.embedder().embed(samples)
            scores = private_scores(
                ctx, embeddings, sigma, cfg.sample_rate, round_index, cfg.standardize_scores
            )
            pairs = preference_pairs(prompts, samples, scores, cfg.rejected_rank)
            snapshots, loss = train_dpo(
                model,
                generator.tokenizer,
                pairs,
                cfg,
                str(ctx.work_dir / "popri_dpo"),
                _seed(ctx.rng(round_index, _DPO)),
            )
            fids = []
            for snapshot in snapshots:
                set_peft_model_state_dict(model, snapshot)
                with generator.adapted(model):
                    fids.append(self._fid(ctx, generator, round_index))
        epoch = int(np.argmin(fids))
        ctx.diagnostics.write("popri_fid_per_epoch", fids, round_index)
        ctx.diagnostics.write("popri_dpo_loss", loss, round_index)
        best = state["best"]
        if best is None or fids[epoch] < best["fid"]:
            best = {
                "adapter": snapshots[epoch],
                "fid": fids[epoch],
                "round": round_index,
                "epoch": epoch + 1,
            }
        history = state["history"] + [
            {
                "round": round_index,
                "fid_per_epoch": fids,
                "selected_epoch": epoch + 1,
                "dpo_loss": loss,
            }
        ]
        return {"adapter": snapshots[epoch], "best": best, "history": history}

    def finish(self, ctx: MethodContext, state: dict[str, Any]) -> Artifact:
        cfg = self.popri
        generator = ctx.profile.generator()
        rng = ctx.rng(cfg.rounds, _PROMPTS)
        params = release_sampling(self.config, cfg.max_new_tokens)
        with (
            lora_policy(generator, cfg, state["best"]["adapter"]) as model,
            generator.adapted(model),
        ):
            texts = expand(
                generator,
                eligible_public(ctx, 1),
                cfg.num_synthetic,
                params,
                cfg.generate_batch_size,
                rng,
            )
        return Artifact(kind=self.artifact_kind, texts=texts)
