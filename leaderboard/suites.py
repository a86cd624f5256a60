"""Named suites: the same split, budgets, seeds and evaluation for every method ranked.

``quick`` is the offline quickstart of ``make run`` (KJV demo split, ``cpu`` profile, ε=1);
``tiny`` is the same protocol on the ``tiny`` profile, for tests. A third-party adapter
submitted with ``fedsynth submit`` is run through a suite exactly like the built-ins.
"""

from __future__ import annotations

import functools
import json
import logging
import math
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmark.data import FederatedSplit
from benchmark.files import atomic_write
from benchmark.spec import RunSpec, spec_from_dict
from leaderboard.entries import (
    PublicationRefused,
    build_entry,
    canary_refutation,
    content_digest,
    entry_key,
    version_definition,
)
from leaderboard.executors import Executor, Job, LocalExecutor, cached_split, run_job
from leaderboard.schema import EntryError
from leaderboard.signing import accepted_keys, host_key, sign_entry, verified_body
from leaderboard.store import (
    record_path,
    stored_records,
    superseded_entries,
    write_entry,
    write_manifest,
    write_record,
    write_version,
)
from leaderboard.store_index import INDEX_FILE, read_index, update_index

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

_log = logging.getLogger(__name__)

PUBLISHED_METHODS = (
    "public_only",
    "nonprivate",
    "oracle",
    "dp_fedavg",
    "dp_ftrl",
    "pre_text",
    "pe_sft",
    "popri",
)
# Budgets fixed by what the row is: the ε = 0 / ε = ∞ bounds and the (non-private) control.
FIXED_EPSILONS = {
    "public_only": 0.0,
    "base_model": 0.0,
    "nonprivate": math.inf,
    "oracle": math.inf,
    "generator_only": 0.0,
}
STANDARD_METRICS = (
    {"name": "next_token", "settings": {}},
    {"name": "fid", "settings": {}},
    {"name": "mia", "settings": {}},
    {"name": "dcr", "settings": {}},
)


@dataclass(frozen=True)
class Variant:
    """A named row of a paper's table: ``method`` under its own ``params`` at one budget.
    A paper's table has several rows of one method at one ε (paper 001's ε = 8 with and
    without refinement), so the row's name goes into its entries (``variant``) and keeps
    them apart in the store and the tables."""

    method: str
    epsilon: float
    params: dict[str, Any] = field(default_factory=dict)
    description: str = ""


@dataclass(frozen=True)
class Suite:
    name: str
    source: str
    split_options: dict[str, Any]
    profile: str
    epsilons: tuple[float, ...]
    delta: float
    seeds: tuple[int, ...]
    metrics: tuple[dict[str, Any], ...] = STANDARD_METRICS
    methods: tuple[str, ...] = PUBLISHED_METHODS
    method_params: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Parameters selected on validation for one (method, ε) (:mod:`leaderboard.tuning`),
    # over ``method_params``. Each selection is its signed report's under
    # ``results/<version>/<split>/_tuning/``; tests/test_published_results.py holds them equal.
    selected_params: dict[str, dict[float, dict[str, Any]]] = field(default_factory=dict)
    downstream: dict[str, Any] = field(default_factory=dict)
    # Fewer seeds at some budgets (paper 000's ε grid: 3 seeds at ε = 1, 1 at ε = 7).
    seeds_by_epsilon: dict[float, tuple[int, ...]] = field(default_factory=dict)
    # Privacy fields set per method beyond ε and δ: a method whose paper defines another
    # privacy unit (fed_ctg: client_sample) runs under it, and its entry says so.
    method_privacy: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The declared tuning budget: each tuned method's candidate grid on validation
    # (`fedsynth suite tune` runs it when no --grid is given).
    tuning: dict[str, dict[str, list[Any]]] = field(default_factory=dict)
    # A paper's named rows (``methods`` lists their names, in the table's order).
    variants: dict[str, Variant] = field(default_factory=dict)
    # Trusted set-up on the built split before any (sandboxed) run, e.g. a cache the
    # method processes may read but not write.
    prepare: Callable[[Path], None] | None = None
    # Named paired differences of two rows (minuend, subtrahend), reported under the table.
    contrasts: dict[str, tuple[str, str]] = field(default_factory=dict)

    def budgets(self, method: str) -> tuple[float, ...]:
        if method in self.variants:
            return (self.variants[method].epsilon,)
        return (FIXED_EPSILONS[method],) if method in FIXED_EPSILONS else self.epsilons

    def method_of(self, row: str) -> str:
        """The registered method a row runs (a variant's, else the row's own name)."""
        return self.variants[row].method if row in self.variants else row

    def seeds_for(self, epsilon: float) -> tuple[int, ...]:
        return self.seeds_by_epsilon.get(epsilon, self.seeds)

    def grid(self, methods: Sequence[str] | None = None) -> list[tuple[str, float, int]]:
        """Every (method, ε, seed) run of the suite, in run order."""
        return [
            (method, eps, seed)
            for method in methods or self.methods
            for eps in self.budgets(method)
            for seed in self.seeds_for(eps)
        ]

    def spec(
        self,
        method: str,
        epsilon: float,
        seed: int,
        split_path: Path,
        params: dict[str, Any] | None = None,
    ) -> RunSpec:
        """The run spec of one grid cell; ``params`` override the suite's method parameters
        and its selections (a tuning candidate, :mod:`leaderboard.tuning`); ``method`` may
        name a variant row, whose parameters come between the method's and those."""
        name = self.method_of(method)
        variant = self.variants[method].params if method in self.variants else {}
        selected = self.selected_params.get(method, {}).get(epsilon, {})
        method_params = {
            **self.method_params.get(name, {}), **variant, **selected, **(params or {})
        }  # fmt: skip
        return spec_from_dict(
            {
                "split": {"path": str(split_path)},
                "method": {"name": name, "params": method_params},
                "privacy": {
                    "epsilon": epsilon,
                    "delta": self.delta,
                    **self.method_privacy.get(name, {}),
                },
                "evaluation": {"metrics": list(self.metrics), "downstream": self.downstream},
                "seed": seed,
                "profile": self.profile,
            }
        )


# The one-run canary audit (benchmark/evaluation/canary_audit.py): listing it makes the
# runner insert canaries, and the entry shows the ε lower bound beside the accounted ε.
CANARY_AUDIT = {"name": "canary", "settings": {}}

# The quickstart must finish in ~20 min on 2 CPU cores, so the quick suite keeps 2 spans
# per chapter, 400 public spans, one non-private epoch and 200-sample audits. Every release is
# scored on 64 texts (the cpu text releases' size; 64 samples from a released model), since
# FID depends on the sample size.
QUICK_METRICS = (
    {"name": "next_token", "settings": {}},
    {"name": "fid", "settings": {}},
    {"name": "mia", "settings": {"n_samples": 200}},
    {"name": "dcr", "settings": {"n_samples": 200}},
    CANARY_AUDIT,
)

# The quickstart is a smoke test of the whole pipeline, not a benchmark (that is ``bench``):
# the LLM methods run at the pre-working-scale sizes that kept ``make run`` under 20 minutes
# (64-text releases; PE 3 rounds of 16 samples without lookahead; POPri 1 round of 4 × 4).
QUICK_PE = {"population_size": 16, "iterations": 3, "lookahead": 0, "variation_max_new_tokens": 48}
QUICK_PARAMS: dict[str, dict[str, Any]] = {
    "nonprivate": {"epochs": 1},
    "oracle": {"num_texts": 64},
    "pre_text": {**QUICK_PE, "expand_size": 64, "expand_max_new_tokens": 48},
    "pe_sft": {
        **QUICK_PE,
        "sft_top_k": 16,
        "sft_batch_size": 4,
        "sft_max_completion_tokens": 48,
        "generate_size": 64,
        "generate_max_new_tokens": 48,
    },
    "popri": {
        "rounds": 1,
        "num_prompts": 4,
        "samples_per_prompt": 4,
        "rejected_rank": 3,
        "max_new_tokens": 48,
        "fid_samples": 4,
        "num_synthetic": 64,
    },
}

# The benchmark suite: the chitchat population with the person as the privacy unit (a
# client is one chat participant with all their conversations, capped at the source's
# k = 8 spans; 100 validation and 250 test people held out whole, so the parts are
# person-disjoint: ~650 private train people), the cpu profile, paper 000's budgets at
# δ = 1e-5 < 1/N, 500-sample audits. The earlier version (lb-06741a6a58) made one side of
# one conversation a client (5,816 train "users" from 1,055 people; one person held 15 %),
# so its "user-level" ε was group privacy for most of the data.
#
# k is to be selected on validation by the oracle's power (measurements/choose_person_cap.py,
# caps 4 / 8 / 16 / 32); until its report is committed, 8 is the source's default, not a
# selection. Text releases are 2,000 texts (PrE-Text's N_syn = 2,048, paper 004 App. D.2).
BENCH_SPLIT: dict[str, Any] = {}
BENCH_RELEASE = 2000
BENCH_METRICS = (
    {"name": "next_token", "settings": {}},
    {"name": "fid", "settings": {}},
    {"name": "mia", "settings": {"n_samples": 500}},
    {"name": "dcr", "settings": {"n_samples": 500}},
    CANARY_AUDIT,
)
BENCH_FEDERATED = {"rounds": 20, "local_batch_size": 4, "select_every": 5}
BENCH_PE = {"population_size": 256, "iterations": 3, "lookahead": 1}
# One downstream recipe: the evaluator fine-tunes every text release with it, and the
# ε = ∞ bound trains the private texts with the same lr, epochs and batch (issue 32: the
# bound used 2 epochs at 1e-3 against the releases' 3 at 2e-4).
BENCH_DOWNSTREAM = {"model_samples": 1000, "epochs": 3, "lr": 2e-4}


def same_recipe(downstream: dict[str, Any]) -> dict[str, Any]:
    """``nonprivate``'s training parameters equal to the evaluator's downstream recipe."""
    from benchmark.evaluation.downstream import DownstreamConfig

    recipe = DownstreamConfig(**downstream)
    return {"epochs": recipe.epochs, "lr": recipe.lr, "batch_size": recipe.batch_size}


BENCH_PARAMS: dict[str, dict[str, Any]] = {
    "nonprivate": same_recipe(BENCH_DOWNSTREAM),
    "oracle": {"num_texts": BENCH_RELEASE},
    "dp_fedavg": {**BENCH_FEDERATED, "clients_per_round": 100},
    "dp_ftrl": {**BENCH_FEDERATED, "cohort_size": 100},
    "pre_text": {**BENCH_PE, "expand_size": BENCH_RELEASE},
    "pe_sft": {**BENCH_PE, "generate_size": BENCH_RELEASE},
    "popri": {"num_synthetic": BENCH_RELEASE},
    # The ε = 0 control (issue 32): the generator from the same public prompts as POPri's
    # round 0, at the same release size, with no private signal.
    "generator_only": {"num_synthetic": BENCH_RELEASE},
}
# Equal tuning (issue 32): one declared budget, the same number of candidates on
# validation for every tuned method. The DP-FL grid is paper 000 App. C.1's lr × clip grid
# ({0.001, 0.01, 0.1} × {0.01, 0.1, 1.0}) extended one step past the corner where every
# selection on the previous split sat (lr 0.1, clip 1.0); the LLM methods tune their
# release's sampling (post-processing, no privacy cost: methods/release_sampling.py) over
# as many points. Selections are adopted in BENCH_SELECTED from their signed reports in
# results/<version>/<split>/_tuning/ (tests/test_published_results.py holds them equal).
DP_FL_GRID = {"client_lr": [0.001, 0.01, 0.1, 1.0], "clip_norm": [0.01, 0.1, 1.0, 10.0]}
RELEASE_SAMPLING_GRID = {
    "release_temperature": [0.7, 0.85, 1.0, 1.15],
    "release_top_p": [0.8, 0.9, 0.95, 1.0],
}
BENCH_TUNING = {
    "dp_fedavg": DP_FL_GRID,
    "dp_ftrl": DP_FL_GRID,
    **dict.fromkeys(("popri", "pre_text", "pe_sft", "generator_only"), RELEASE_SAMPLING_GRID),
}
# None yet on the person-unit split: the previous split's selections (lr 0.1, clip 1.0 at
# ε = 1 and 7 for both DP-FL methods, lb-06741a6a58's reports) were made on other clients.
BENCH_SELECTED: dict[str, dict[float, dict[str, Any]]] = {}

# The preference track (paper 003): the offline chitchat preference pairs (a reply a person
# wrote, preferred over a same-topic reply from another conversation; one tuple per privacy
# unit, as the paper's Def. 3.1), the ε = 0 base model, DPPrefSyn and DP-FT. Every release
# aligns the profile's preference policy (SFT + DPO) and is scored by win rate against the
# test tuples' chosen replies (an offline judge, :data:`PREFERENCE_JUDGE`), the policy's
# reward accuracy (the co-headline) and PREMIA membership inference.
PREFERENCE_METHODS = ("base_model", "dpprefsyn", "dp_ft")
PREFERENCE_PRIVACY = {m: {"unit": "sample"} for m in PREFERENCE_METHODS}


# The offline judge of the preference track: context PMI, log p(r|x) − log p(r|"Human:"),
# under Gemma 3 270M, a model no policy starts from (every policy starts from SmolLM2, whose
# greedy replies climb SmolLM2's own likelihood, so a SmolLM2 judge favours the base model).
# Its gate (measurements/judge_agreement.py, 100 public pairs, docs/measurements/
# judge_agreement.json): human vs human 79 %, base model vs human 60 %, short of the 70 %
# bar on the second (SmolLM2's PMI: 71 % and 32 %). Not comparable with paper 003's GPT-4o.
PREFERENCE_JUDGE = {"type": "pmi", "null_prompt": "\n\nHuman: ", "lm": "gemma-3-270m"}
# The tests' suite scores with the tiny profile's own generator: it checks the plumbing,
# not the judge.
TINY_PREFERENCE_JUDGE = {"type": "pmi", "null_prompt": "\n\nHuman: "}


def preference_metrics(
    prompts: int, audit: int, tokens: int, judge: dict[str, Any]
) -> tuple[dict[str, Any], ...]:
    """Win rate under ``judge`` on ``prompts`` test prompts (answers of ``tokens`` tokens),
    reward accuracy and PREMIA on ``audit`` tuples (responses cut to ``tokens``, as in the
    alignment), and the canary audit (canary tuples scored by the policy's margin)."""
    audited = {"n": audit, "max_completion_tokens": tokens}
    judged = {"n_prompts": prompts, "max_new_tokens": tokens, "judge": judge}
    return (
        {"name": "win_rate", "settings": judged},
        {"name": "reward_accuracy", "settings": audited},
        {"name": "premia", "settings": audited},
        CANARY_AUDIT,
    )


# cpu alignment of SmolLM2-135M: paper 003's recipe, one DPO epoch. The paper's DPO moves
# its policy by lr × steps ≈ 1e-6 × 3 epochs × ~80 steps (5,000 pairs at batch 64) ≈ 2.4e-4;
# ~300 synthetic pairs at batch 16 are ~19 steps, so DPO runs at 1e-5 (≈ 1.9e-4). Fixed
# by that rule, not tuned, and the same for every release.
CPU_ALIGNMENT = {
    "sft_lr": 1e-5,
    "dpo_lr": 1e-5,
    "dpo_epochs": 1,
    "batch_size": 16,
    "max_completion_tokens": 48,
}
# The cpu preference grid sized for two CPU cores (one full-model DP-SGD backward per
# tuple is ~0.7 s for SmolLM2, a DPO pair ~2.2 s): one pair per speaker (~500 train
# tuples), two turns of context of at most 200 characters, 300 test speakers so that
# PREMIA compares 300 members with 300 non-members, 300 public prompts (1,500 candidates).
PREFS_SPLIT = {
    "cap": 1,
    "test_clients": 300,
    "public_max": 300,
    "source_options": {"history": 2, "max_chars": 200},
}
PREFS_PARAMS = {
    "dpprefsyn": {"public_prompts": 300, "max_new_tokens": 48},
    "dp_ft": {"max_completion_tokens": 48},
}
# Seven seeds: the smallest n whose 95 % t-interval over seeds is at most ±5 points at the
# pooled seed-to-seed std of the 3-seed grid (win rate 4.8 points → 7 seeds; reward
# accuracy 2.9 → 4, its noisiest cell 4.9 → 7; measurements/prefs_seed_count.py).
PREFS_SEEDS = tuple(range(7))
TINY_ALIGNMENT = {"sft_lr": 1e-3, "dpo_lr": 1e-3, "batch_size": 8, "max_completion_tokens": 16}

# Paper 001 (fed_ctg, two-stage control-code generation) as its variants table: Pre., the
# control template at zero steps, ε = ∞, ε = 8 with and without refinement, the uniform
# sampling control (Table A.14). The split: the chatterbot-corpus conversations (899 after
# dedupe, 20 categories = the control codes), dealt IID to 100 clients (the paper's main
# setting is IID): 67 test clients hold 602 texts, so the classifier accuracy's binomial SE
# is ≤ 2.04 points at any accuracy (≤ 2.00 up to 40 %; the issue 35 target), 5 validation
# clients, 28 train clients (252 texts). The source allows no more: a larger test share
# leaves stage 1 fewer texts. δ = 1/(N ln N) at N = 28 (the paper's rule; it exceeds 1/N
# and so needs ``allow_large_delta``); privacy unit: each client's own samples.
PAPER001_SPLIT = {
    "partition": "iid",
    "partition_params": {"num_clients": 100},
    "validation_clients": 0.05,
    "test_clients": 0.67,
}
PAPER001_TRAIN_CLIENTS = 28
# The probe's C = 10 (on the validation part's real texts, 5-fold CV: C = 1 regularises the
# unit-norm embeddings to the majority class).
PAPER001_METRICS = (
    {"name": "classification", "settings": {"c": 10.0}},
    {"name": "mauve", "settings": {}},
    {"name": "fid", "settings": {}},
)
# The paper's zero-shot prompts name the genre (review, abstract); chatterbot's is dialogue.
PAPER001_PROMPT = "Please generate a conversation about topic {label}:\n\n"
PAPER001_VARIANTS = {
    "pre": Variant(
        "fed_ctg", math.inf, {"finetune": False, "refinement": "none"},
        "Pre.: the pretrained model prompted with the zero-shot prompt; no private data",
    ),
    "control_zero_steps": Variant(
        "fed_ctg", math.inf,
        {"finetune": False, "refinement": "none", "zero_shot_template": "{label}\n"},
        "the control template stage 1 trains on, at zero steps: separates the prompt from "
        "stage 1's fine-tuning (stage 1's own effect = eps_inf − this row)",
    ),
    "pre_refinement": Variant(
        "fed_ctg", 8.0, {"finetune": False, "refinement": "votes"},
        "Pre. + stage 2's DP refinement votes",
    ),
    "eps_inf": Variant(
        "fed_ctg", math.inf, {"refinement": "none"}, "stage 1 without noise, no refinement"
    ),
    "eps8": Variant("fed_ctg", 8.0, {"refinement": "none"}, "stage 1 at ε = 8, no refinement"),
    "eps8_refinement": Variant(
        "fed_ctg", 8.0, {"refinement": "votes"}, "stage 1 and refinement at ε = 8"
    ),
    "eps8_uniform": Variant(
        "fed_ctg", 8.0, {"refinement": "uniform"},
        "refinement's uniform-sampling control (Table A.14)",
    ),
}  # fmt: skip
# Stage 1's own effect: a paired difference of two rows (minuend, subtrahend) per seed.
PAPER001_CONTRASTS = {"stage 1's own effect": ("eps_inf", "control_zero_steps")}

# Paper 002 (dp_ftrl_dm, public pre-/mid-training and distillation) as its Table 2, LSTM
# and transformer, at its larger budget ε = 18.71, δ = 1e-6, on the bench suite's split
# (the person as the privacy unit). Every train client takes part once: the cohort per
# round is ⌊N / T⌋ (``cohort_size: one_pass``, one tree of T = 24 leaves), as paper 002's
# single-participation regime; σ is the accountant's for that tree at the same ε,
# whatever the cohort. The metric is paper 002's in-vocabulary next-token accuracy.
PAPER002_ROWS: dict[str, dict[str, Any]] = {
    "no_public": {"midtrain_round": None, "distill_beta": 0.0},
    "pretrain_all": {"midtrain_round": None, "pretrain": "all", "distill_beta": 0.0},
    "midtrain_distill_dm": {"midtrain_data": "dm"},
    "midtrain_random": {"midtrain_data": "random", "distill_beta": 0.0},
    "pretrain_distill": {"midtrain_round": None, "pretrain": "random", "pretrain_fraction": 0.25},
    "midtrain_distill": {"midtrain_data": "random"},
    "midtrain_distill_dm_wo_ppub": {"midtrain_data": "dm_private_only"},
}
PAPER002_VARIANTS = {
    f"{model}_{row}": Variant(
        "dp_ftrl_dm", 18.71, {**params, "model": model, "cohort_size": "one_pass"},
        f"{model}: {row.replace('_', ' ')}",
    )
    for model in ("lstm", "transformer")
    for row, params in PAPER002_ROWS.items()
}  # fmt: skip


def warm_teacher(split_path: Path) -> None:
    """The public LLM's pass over the split's public spans (dp_ftrl_dm's distillation
    teacher), cached here, in the trusted process, before the sandboxed runs read it."""
    from benchmark.data import TEXT
    from benchmark.profiles import get_profile
    from benchmark.profiles.teacher_corpus import teacher_corpus
    from benchmark.split_storage import load_split
    from methods.dp_ftrl_dm import DPFTRLDM

    config = DPFTRLDM.resolve_config("cpu", {})
    texts = [r[TEXT] for r in load_split(split_path).records("public")]
    teacher_corpus(
        get_profile("cpu").public_llm(), texts, config["max_length"], config["distill_top_k"]
    )


SUITES = {
    "quick": Suite(
        name="quick",
        source="kjv",
        split_options={"cap": 2, "public_max": 400},
        profile="cpu",
        epsilons=(1.0,),
        delta=3e-6,
        seeds=(0,),
        metrics=QUICK_METRICS,
        method_params=QUICK_PARAMS,
        downstream={"model_samples": 64},
    ),
    "bench": Suite(
        name="bench",
        source="chitchat",
        split_options=BENCH_SPLIT,
        profile="cpu",
        epsilons=(1.0, 7.0),
        delta=1e-5,
        seeds=(0, 1, 2),  # at every budget: a cell is ranked only with >= 3 seeds
        metrics=BENCH_METRICS,
        methods=(*PUBLISHED_METHODS, "generator_only"),
        method_params=BENCH_PARAMS,
        selected_params=BENCH_SELECTED,
        downstream=BENCH_DOWNSTREAM,
        tuning=BENCH_TUNING,
    ),
    "tiny": Suite(
        name="tiny",
        source="kjv",
        split_options={"max_records": 3000, "cap": 2, "public_max": 200},
        profile="tiny",
        epsilons=(1.0,),
        delta=3e-6,
        seeds=(0,),
        metrics=QUICK_METRICS,
        downstream={"model_samples": 16},
        methods=(*PUBLISHED_METHODS, "fed_ctg", "dp_ftrl_dm", "generator_only"),
        method_privacy={"fed_ctg": {"unit": "client_sample"}},
    ),
    "prefs": Suite(
        name="prefs",
        source="chitchat_prefs",
        split_options=PREFS_SPLIT,
        profile="cpu",
        epsilons=(1.0, 4.0, math.inf),
        delta=1e-5,
        seeds=PREFS_SEEDS,
        metrics=preference_metrics(
            100, 300, CPU_ALIGNMENT["max_completion_tokens"], PREFERENCE_JUDGE
        ),
        methods=PREFERENCE_METHODS,
        method_params=PREFS_PARAMS,
        method_privacy=PREFERENCE_PRIVACY,
        downstream={"alignment": CPU_ALIGNMENT},
    ),
    "paper001": Suite(
        name="paper001",
        source="chatterbot",
        split_options=PAPER001_SPLIT,
        profile="cpu",
        epsilons=(8.0,),
        delta=1 / (PAPER001_TRAIN_CLIENTS * math.log(PAPER001_TRAIN_CLIENTS)),
        seeds=(0, 1, 2),
        metrics=PAPER001_METRICS,
        methods=tuple(PAPER001_VARIANTS),
        method_params={"fed_ctg": {"delta_rule": "ln", "zero_shot_template": PAPER001_PROMPT}},
        method_privacy={"fed_ctg": {"unit": "client_sample", "allow_large_delta": True}},
        variants=PAPER001_VARIANTS,
        contrasts=PAPER001_CONTRASTS,
    ),
    "paper002": Suite(
        name="paper002",
        source="chitchat",
        split_options=BENCH_SPLIT,
        profile="cpu",
        epsilons=(18.71,),
        delta=1e-6,
        seeds=(0, 1, 2),
        metrics=({"name": "in_vocab", "settings": {}},),
        methods=tuple(PAPER002_VARIANTS),
        downstream={"max_length": 20},
        variants=PAPER002_VARIANTS,
        prepare=warm_teacher,
    ),
    "tiny_prefs": Suite(
        name="tiny_prefs",
        source="chitchat_prefs",
        split_options={"cap": 2, "public_max": 40},
        profile="tiny",
        epsilons=(4.0,),
        delta=1e-5,
        seeds=(0,),
        metrics=preference_metrics(8, 100, 16, TINY_PREFERENCE_JUDGE),
        methods=PREFERENCE_METHODS,
        method_privacy=PREFERENCE_PRIVACY,
        downstream={"alignment": TINY_ALIGNMENT},
    ),
}


# Methods that start from the public start themselves (model releases and the ε = 0 row).
OWN_START_METHODS = ("public_only", "nonprivate", "dp_fedavg", "dp_ftrl")


def paper000_view(suite: Suite) -> Suite:
    """The same split under paper 000's protocol: every release and every model-training
    method starts from the profile's generic on-device LM (no public fine-tuning), so the
    ε = 0 row is that checkpoint untouched. A side table: the suite's own view, from the
    in-domain public start, is the stronger bar a practitioner faces."""
    params = {m: {**suite.method_params.get(m, {}), "public_epochs": 0} for m in OWN_START_METHODS}
    return replace(
        suite,
        name=f"{suite.name}_paper000",
        method_params={**suite.method_params, **params},
        downstream={**suite.downstream, "start": "generic"},
    )


SUITES["bench_paper000"] = paper000_view(SUITES["bench"])


def with_profile(suite: Suite, profile: str | None) -> Suite:
    """``suite`` on ``profile`` in place of its own (None: unchanged): the same split,
    budgets, seeds and metrics; the methods take that profile's configs, and the entries
    are of another leaderboard version (the instrument is part of it)."""
    return suite if profile is None else replace(suite, profile=profile)


# The preference policy is the preference track's instrument where a profile names its own
# (paper: Pythia-2.8B); in tiny and cpu it is the generator and not described apart.
INSTRUMENT_KEYS = (
    "ondevice_lm",
    "ondevice_tokenizer",
    "ondevice_corpus",
    "embedder",
    "preference_policy",
)


def instrument(profile: str) -> dict[str, str]:
    """The parts of a profile that measure every release (not the methods' own models)."""
    from benchmark.profiles import get_profile

    described = get_profile(profile).describe()
    return {k: described[k] for k in INSTRUMENT_KEYS if k in described}


def ensure_split(suite: Suite, splits_root: Path) -> Path:
    """Build the suite's split once (deterministic: same options, same hash)."""
    from benchmark.registry import DATASETS
    from benchmark.split_storage import is_complete
    from datasets_builders.pipeline import build_split, options_for

    out = splits_root / f"{suite.source}-{suite.name}"
    if not is_complete(out):
        source = DATASETS.get(suite.source)()
        build_split(source, options_for(source, suite.split_options), out)
    return out


def signed_records(
    results_root: Path, lb_version: str, split_name: str, keys: dict[str, Ed25519PublicKey]
) -> dict[str, Any]:
    """The run records the store keeps for this version and split, by run key, each checked
    against ``keys`` and against the store's signed index, when it has one (a record edited
    in the store stops the suite, whoever re-signed it), and returned without its
    signature, as the run wrote it."""
    indexed = (results_root / INDEX_FILE).exists()
    listed = read_index(results_root, keys) if indexed else {}
    records = {}
    for signed in stored_records(results_root, lb_version, split_name):
        body = verified_body(signed, keys)
        path = record_path(results_root, lb_version, split_name, body["run_key"])
        name = path.relative_to(results_root).as_posix()
        if indexed and listed.get(name) != content_digest(body):
            raise EntryError(f"kept record {name}: not as the store's signed index lists it")
        records[body["run_key"]] = body
    return records


@dataclass(frozen=True)
class SuiteStore:
    """A suite's split and leaderboard version in one results store: where its runs' records
    go, signed with ``key``, the records the store already keeps (by run key), and the
    cells refused publication so far (entry key → why)."""

    results_root: Path
    key: Ed25519PrivateKey  # the host's signing key
    keys: dict[str, Ed25519PublicKey]  # whose signatures count: the repository's and the host's
    split_path: Path
    split_name: str
    lb_version: str
    stored: dict[str, Any]
    refused: dict[str, str] = field(default_factory=dict)


def open_store(suite: Suite, results_root: Path, splits_root: Path) -> SuiteStore:
    """Build the suite's split if needed, write its version and manifest into the store and
    read the store's kept records."""
    key = host_key(results_root)  # before hours of runs: a misplaced key fails now
    split_path = ensure_split(suite, splits_root)
    if suite.prepare is not None:
        suite.prepare(split_path)
    split: FederatedSplit = cached_split(str(split_path))
    definition = version_definition(
        [split.content_hash], suite.metrics, suite.downstream, instrument(suite.profile)
    )
    lb_version = write_version(results_root, definition)
    write_manifest(results_root, lb_version, split.name, split.manifest)
    keys, _ = accepted_keys(results_root, trust_host=True)
    stored = signed_records(results_root, lb_version, split.name, keys)
    return SuiteStore(results_root, key, keys, split_path, split.name, lb_version, stored)


def run_jobs(
    store: SuiteStore,
    jobs: Sequence[Job],
    *,
    runs_root: Path,
    plugin: Path | None = None,
    finished_only: bool = False,
    executor: Executor | None = None,
    client_actors: int = 0,
) -> Iterator[tuple[Job, str, dict[str, Any]]]:
    """(job, run key, record) of every job that finished, in any order: a run the store keeps
    is not repeated, and every new run's record is kept, signed, in the store and its
    signed index. A run whose canary audit refutes its ε is neither kept nor yielded: its
    cell goes into ``store.refused`` and the reason into its run directory."""
    runner = LocalExecutor() if finished_only or executor is None else executor
    work = functools.partial(
        run_job, runs_root=runs_root, split_path=store.split_path, plugin=plugin,
        finished_only=finished_only, stored=store.stored, client_actors=client_actors,
    )  # fmt: skip
    for job, outcome in runner.outcomes(jobs, work):
        if outcome is None:
            continue
        run_key, record = outcome
        if run_key not in store.stored:
            refuted = canary_refutation(record)
            if refuted:
                refuse(store, entry_key(run_key, job.spec.seed), f"{run_key}: {refuted}")
                atomic_write(runs_root / run_key / REFUSED, json.dumps({"reason": refuted}))
                continue
            signed = sign_entry(record, store.key)
            path = write_record(store.results_root, store.lb_version, store.split_name, signed)
            update_index(store.results_root, store.key, store.keys, written=[path])
        yield job, run_key, record


REFUSED = "publication_refused.json"  # in a run directory: why its record was not kept


def refuse(store: SuiteStore, cell: str, reason: str) -> None:
    """Keep ``cell`` (an entry key) from publication, and say why in the log."""
    _log.error("not published: %s", reason)
    store.refused.setdefault(cell, reason)


def check_refusals(store: SuiteStore) -> None:
    """Raise :class:`PublicationRefused` naming every refused cell, if any."""
    if store.refused:
        raise PublicationRefused("not signed or published: " + "; ".join(store.refused.values()))


def run_suite(
    suite: Suite,
    *,
    methods: Sequence[str] | None = None,
    results_root: Path,
    runs_root: Path,
    splits_root: Path,
    on_run: Callable[[str], None] | None = None,
    plugin: Path | None = None,
    finished_only: bool = False,
    executor: Executor | None = None,
    client_actors: int = 0,
) -> list[dict[str, Any]]:
    """Run every (method, ε, seed) of the suite on the isolated path; write and return one
    entry per (method, ε), signed with the host's key (leaderboard/signing.py).

    ``on_run`` is called with a label after each finished run (progress reporting);
    ``plugin`` is a submitted adapter file (loaded only in the method's processes). With
    ``finished_only`` nothing is run: entries are written from the runs already finished
    (a long grid's rows as they complete, with the seeds they have so far). ``executor``
    runs the grid (default: one run after another here; :mod:`leaderboard.executors`);
    ``client_actors`` > 0 spreads each run's clients over that many Ray actors. An entry
    replaces the entries of its cell written with other parameters (the old runs' records
    stay in the store). A cell any of whose runs the canary audit refutes is not
    published (no seed is silently dropped from it): the others are, then
    :class:`PublicationRefused` names it.
    """
    store = open_store(suite, results_root, splits_root)
    jobs = [
        Job(f"{row} ε={eps:g} seed={seed}", suite.spec(row, eps, seed, store.split_path), row)
        for row, eps, seed in suite.grid(methods)
    ]
    grouped: dict[str, list[dict[str, Any]]] = defaultdict(list)
    variant_of: dict[str, str | None] = {}
    for job, run_key, record in run_jobs(
        store, jobs, runs_root=runs_root, plugin=plugin, finished_only=finished_only,
        executor=executor, client_actors=client_actors,
    ):  # fmt: skip
        cell = entry_key(run_key, job.spec.seed)
        grouped[cell].append(record)
        variant_of[cell] = job.row if job.row in suite.variants else None
        if on_run:
            on_run(job.label)
    entries = []
    for cell, records in grouped.items():
        if cell not in store.refused:
            try:
                entry = build_entry(records, store.lb_version, variant=variant_of[cell])
                entries.append(sign_entry(entry, store.key))
            except PublicationRefused as exc:
                refuse(store, cell, str(exc))
    written, removed = [], []
    for entry in entries:
        written.append(write_entry(results_root, entry))
        for old in superseded_entries(results_root, entry):
            _log.warning("%s replaces %s (the cell's parameters changed)", entry["entry_key"], old)
            old.unlink()
            removed.append(old)
    if written:
        update_index(results_root, store.key, store.keys, written, removed)
    check_refusals(store)
    return entries
