"""DPPrefSyn (paper 003, Algorithm 1): DP preference data synthesis with clustered linear
Bradley–Terry rewards.

Rounds and Algorithm 1's lines (seed-003 §1.3):

- round 0, lines 1–5: each private tuple's d = ψ(x;a⁺) − ψ(x;a⁻) (the profile's
  ``preference_embedder``), client side. With ``center`` (the released code) a DP mean μ
  first: a Laplace sum of the d, each clipped to L1 norm ``mean_l1_bound`` (the pool's
  ``laplace_aggregate``), over the public unit count. Then DP-PCA of d − μ to
  ``components`` = p dimensions (the pool's ``dp_pca``: rows clipped to L2 norm 1, the
  exponential mechanism of Amin et al. 2019).
- round 1, line 6: DP-KMeans (DPLloyd, Su et al. 2016) of z = normalize((d − μ)P) into
  ``clusters`` = K, coordinates in [−``kmeans_bound``, ``kmeans_bound``]: every iteration
  releases the noisy per-cluster counts and coordinate sums (Laplace, through the pool);
  the new centroid is sum / count, clipped to the box. Then every unit's nearest centroid
  defines the pool's partition ``clusters`` (kept by the pool, never seen here), and the
  cluster sizes are released with Laplace noise (``histogram: laplace``, charged to the
  budget: seed-003 §6 caveat 1, fedsynth's fix) or exactly and uncharged (``histogram:
  exact``, the paper's accounting; the pool allows it only in a ``guarantee: simulated``
  run and the ledger shows it). Clusters whose released size is below n_min = ⌊n/(K+4)⌋
  are discarded (n: the units, before any drop, as the code).
- round 2, lines 7–12: one linear reward θ_k ∈ R^p (no bias, PyTorch's default init
  U(±1/√p)) per kept cluster, by DP-SGD on softplus(−θ·z) (the pool's
  ``dp_logistic_sgd`` on the cluster's part): SGD lr ``lr``, Poisson rate ``batch``/ĉ_k
  (ĉ_k the released size), ⌈``epochs``·ĉ_k/``batch``⌉ steps, clip ``clip``. The noise σ2
  is solved, as the paper does, for the smallest allowed cluster (q = batch/n_min,
  T = epochs·n_min/batch) at what remains of ε, and raised where a kept cluster's run
  would exceed it under that σ2 (the paper's "the smallest cluster costs most" fails
  when ⌈·⌉ rounds a larger cluster's steps up: q·T > ``epochs``); the clusters are
  disjoint parts, accounted in parallel (worst part).
- ``finish``, lines 13–19 (post-processing): ``candidates`` = L responses per public
  prompt from the profile's ``preference_generator`` (temperature ``temperature``, cut at "Human:",
  cached per generator and prompt set), a cluster k drawn per prompt ∝ the released
  sizes of the kept clusters, each response scored ⟨θ_k, normalize((ψ(x;a) − μ)P)⟩, the
  argmax as chosen and the argmin as rejected, pairs whose score gap is below ``gap``
  dropped (§4.2; not in Algorithm 1's line 18). The release is the pairs (kind
  ``preferences``).

Budget (finite ε): ε0 = ``pca_share``·ε for round 0 (μ gets ``mean_share`` of it when
centring, the eigenvectors the rest: opendp also spends a third on eigenvalues, which
DPPrefSyn never uses), ε1 = ``kmeans_share``·ε for DP-KMeans (split evenly over iterations
and between counts and sums), ε_h = ``histogram_share``·ε for the sizes, and the rest for
DP-SGD at the spec's δ. The harness records every release and computes ε; the paper's
Table 7 split is ε0 = ε1 = ε/8 with DP-SGD at 3ε/4 (here 3ε/4 − ε_h).

ε = ∞ (§1.5 item 6, the released code's variant): exact mean and top eigenvectors,
noiseless Lloyd iterations, non-private SGD with ``nonprivate_batch`` 64 and
``nonprivate_epochs`` 100; the discard rule still applies. Everything goes through the
pool as non-private releases.

Ablations as params (paper 003 §5, B.5, Figure 2): ``clusters`` (K; 1 = no DP-KMeans),
``pca: false`` (no DP-PCA: cluster and train on the d-dimensional differences; ε0 then
goes to the mean only), ``components`` (p), ``candidates`` (L), ``gap`` (τ; 0 = Algorithm 1
without the filter), ``pca_share`` / ``kmeans_share`` (the ε0/ε1 split), ``public_prompts``
(m), ``center`` / ``normalize`` (paper vs code, §1.5 item 1), ``histogram`` (item 2). Not
built: Table 13's private prompts as public ones (a leak by design).

Choices the paper leaves open (or where we differ), each a param or stated here:

- privacy unit: one tuple (``privacy.unit: sample``), as the paper's Def. 3.1;
- neighbouring relation: add/remove (the pool's mechanisms and accountants); replace-one
  would touch two clusters (seed-003 §6 caveat 2);
- the DP mean clips each d to L1 norm ``mean_l1_bound`` (opendp's clamping is not stated
  in the paper);
- DP-PCA clips rows to L2 norm 1 also at ε = ∞ (sklearn does not clip);
- DP-KMeans: ``kmeans_iterations`` (diffprivlib derives its own count; 7 is its
  historical default), initial centroids uniform in the box from the spec seed
  (diffprivlib draws them data-independently too), budget split evenly (diffprivlib's
  split has a bug: see docs/ or seed notes), empty clusters keep their centroid;
- a kept cluster's sampling weight is its released (noisy) size (the code: raw sizes);
- candidates with fewer than 2 non-empty responses are skipped (the code);
- the seed randomises the method's own draws (init, cluster per prompt, generation);
  DP noise comes from the run's secret seed.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from benchmark.api import (
    Artifact,
    Method,
    MethodContext,
    SamplingParams,
    SpecError,
    candidate_request,
    candidates,
)
from methods.preference_features import (
    Centred,
    ClusterOf,
    Differences,
    KMeansStep,
    Projected,
    project,
)

PARTITION = "clusters"
STOP = ["Human:"]
HISTOGRAMS = ("laplace", "exact")

PAPER = {
    "pca": True,
    "components": 20,
    "clusters": 5,
    "kmeans_iterations": 7,
    "kmeans_bound": 0.5,
    "center": True,
    "normalize": True,
    "mean_share": 0.5,
    "mean_l1_bound": 1.0,
    "pca_share": 0.125,
    "kmeans_share": 0.125,
    "histogram": "laplace",
    "histogram_share": 0.0625,
    "lr": 0.1,
    "batch": 4,
    "epochs": 4,
    "clip": 1.0,
    "nonprivate_batch": 64,
    "nonprivate_epochs": 100,
    "candidates": 5,
    "temperature": 0.9,
    "max_new_tokens": 300,
    "gap": 0.5,
    "public_prompts": 52_000,
}


class DPPrefSyn(Method):
    name = "dpprefsyn"
    artifact_kind = "preferences"
    privacy_units = ("sample",)
    models = ("preference_embedder", "preference_generator")
    configs = {
        "paper": PAPER,
        # cpu: SmolLM2 writes the candidates; 1,000 public prompts keep generation to
        # minutes (the paper's Table 4 runs m = 5,000 … 52,000).
        "cpu": {**PAPER, "max_new_tokens": 64, "public_prompts": 1000},
        "tiny": {
            **PAPER,
            "components": 4,
            "clusters": 2,
            "kmeans_iterations": 2,
            "nonprivate_epochs": 2,
            "candidates": 3,
            "max_new_tokens": 8,
            "public_prompts": 6,
        },
    }

    def num_rounds(self) -> int:
        return 3

    def setup(self, ctx: MethodContext) -> dict[str, Any]:
        self._check()
        return {}

    def _check(self) -> None:
        c = self.config
        self.require_counts(
            "components", "clusters", "kmeans_iterations", "batch", "epochs",
            "nonprivate_batch", "nonprivate_epochs", "candidates", "max_new_tokens",
            "public_prompts",
        )  # fmt: skip
        if c["candidates"] < 2:
            raise SpecError("method.params.candidates: need >= 2 to pick chosen and rejected")
        shares = [c[k] for k in ("mean_share", "pca_share", "kmeans_share", "histogram_share")]
        if any(not 0 <= s < 1 for s in shares) or c["pca_share"] == 0 or c["kmeans_share"] == 0:
            raise SpecError("method.params: shares must lie in [0, 1) (pca and kmeans > 0)")
        if c["pca_share"] + c["kmeans_share"] + c["histogram_share"] >= 1:
            raise SpecError("method.params: pca + kmeans + histogram shares leave no DP-SGD budget")
        if (
            not isinstance(c["pca"], bool)
            or not isinstance(c["center"], bool)
            or not isinstance(c["normalize"], bool)
        ):
            raise SpecError("method.params: pca, center and normalize are true or false")
        if c["histogram"] not in HISTOGRAMS:
            raise SpecError(f"method.params.histogram: one of {HISTOGRAMS}, got {c['histogram']!r}")
        if c["histogram"] == "laplace" and c["histogram_share"] == 0:
            raise SpecError("method.params.histogram_share: a Laplace histogram needs a share > 0")
        self.require_positive("kmeans_bound", "mean_l1_bound", "lr", "clip", "temperature")
        if not (isinstance(c["gap"], int | float) and c["gap"] >= 0):
            raise SpecError(f"method.params.gap: expected a number >= 0, got {c['gap']!r}")

    # -- budget ---------------------------------------------------------------------------

    def _epsilon(self, ctx: MethodContext, share: float) -> float:
        """``share`` of the budget for a pure-ε release (∞ in the non-private run)."""
        total = ctx.privacy.epsilon
        if total <= 0:
            raise SpecError("privacy.epsilon: 0 allows no private release; use base_model")
        return math.inf if math.isinf(total) else share * total

    def _sgd_epsilon(self, ctx: MethodContext) -> float:
        c = self.config
        spent = c["pca_share"] + c["kmeans_share"]
        if c["histogram"] == "laplace":
            spent += c["histogram_share"]
        return self._epsilon(ctx, 1.0 - spent)

    # -- rounds ---------------------------------------------------------------------------

    def round(self, ctx: MethodContext, state: dict[str, Any], round_index: int) -> dict[str, Any]:
        step = (self._project, self._cluster, self._rewards)[round_index]
        return {**state, **step(ctx, state)}

    def _differences(self, ctx: MethodContext) -> Differences:
        return Differences(ctx.profile.preference_embedder())

    def _project(self, ctx: MethodContext, state: dict[str, Any]) -> dict[str, Any]:
        """Lines 1–5: DP mean (when centring) and DP-PCA."""
        c, pool = self.config, ctx.pool
        differences = self._differences(ctx)
        dim = ctx.profile.preference_embedder().dim
        eps0 = self._epsilon(ctx, c["pca_share"])
        mean = np.zeros(dim)
        pca_eps = eps0
        if c["center"]:
            mean_eps = eps0 * c["mean_share"] if math.isfinite(eps0) else math.inf
            bound = c["mean_l1_bound"] if math.isfinite(eps0) else math.inf
            total = pool.laplace_aggregate(
                differences,
                dim=dim,
                l1_bound=bound,
                epsilon=mean_eps,
                label="dp_mean",
                batched=True,
            )
            mean = total / pool.num_clients
            pca_eps = eps0 - mean_eps if math.isfinite(eps0) else math.inf
        if not c["pca"]:  # Figure 2a's "no DP-PCA": the full d-dimensional differences
            return {"mean": mean, "basis": np.eye(dim)}
        basis = pool.dp_pca(
            Centred(differences, mean),
            dim=dim,
            components=c["components"],
            epsilon=pca_eps,
            label="dp_pca",
            batched=True,
        )
        return {"mean": mean, "basis": basis}

    def _projected(self, ctx: MethodContext, state: dict[str, Any]) -> Projected:
        return Projected(
            self._differences(ctx), state["mean"], state["basis"], self.config["normalize"]
        )

    def _cluster(self, ctx: MethodContext, state: dict[str, Any]) -> dict[str, Any]:
        """Line 6: DP-KMeans, the partition into clusters, their released sizes, the discard."""
        c, pool = self.config, ctx.pool
        projected = self._projected(ctx, state)
        k, p, bound = c["clusters"], state["basis"].shape[1], c["kmeans_bound"]
        eps1 = self._epsilon(ctx, c["kmeans_share"])
        step_eps = eps1 / (2 * c["kmeans_iterations"])
        centroids = ctx.rng(1).uniform(-bound, bound, size=(k, p))
        sum_bound = min(bound * p, math.sqrt(p)) if c["normalize"] else bound * p
        for _ in range(c["kmeans_iterations"]):
            counts = pool.laplace_aggregate(
                KMeansStep(projected, centroids, bound, sums=False),
                dim=k,
                l1_bound=1.0,
                epsilon=step_eps,
                label="dp_kmeans/counts",
                batched=True,
            )
            sums = pool.laplace_aggregate(
                KMeansStep(projected, centroids, bound, sums=True),
                dim=k * p,
                l1_bound=sum_bound if math.isfinite(step_eps) else math.inf,
                epsilon=step_eps,
                label="dp_kmeans/sums",
                batched=True,
            ).reshape(k, p)
            filled = counts >= 1
            centroids[filled] = np.clip(sums[filled] / counts[filled, None], -bound, bound)
        pool.define_partition(
            PARTITION, ClusterOf(projected, centroids, bound), parts=k, batched=True
        )
        hist_eps = (
            math.inf if c["histogram"] == "exact" else self._epsilon(ctx, c["histogram_share"])
        )
        sizes = pool.part_sizes(PARTITION, epsilon=hist_eps, label="cluster_sizes")
        smallest = pool.num_clients // (k + 4)
        kept = [int(j) for j in np.flatnonzero(sizes >= max(smallest, 1))]
        return {"centroids": centroids, "sizes": sizes, "kept": kept, "smallest": smallest}

    def _rewards(self, ctx: MethodContext, state: dict[str, Any]) -> dict[str, Any]:
        """Lines 7–12: one DP linear Bradley–Terry reward per kept cluster."""
        c, pool = self.config, ctx.pool
        private = math.isfinite(ctx.privacy.epsilon)
        batch = c["batch"] if private else c["nonprivate_batch"]
        epochs = c["epochs"] if private else c["nonprivate_epochs"]
        smallest = max(state["smallest"], batch)

        def schedule(size: float) -> tuple[float, int]:
            """A cluster's (Poisson rate, steps) from its size."""
            return batch / size, math.ceil(epochs * size / batch)

        schedules = {k: schedule(max(float(state["sizes"][k]), smallest)) for k in state["kept"]}
        rate, steps = schedule(smallest)
        sigma = ctx.noise_for(
            steps=steps,
            sample_rate=rate,
            epsilon=self._sgd_epsilon(ctx),
            parts=list(schedules.values()),
        )
        projected = self._projected(ctx, state)
        p = state["basis"].shape[1]
        rng = ctx.rng(2)
        rewards = {}
        for k, (rate, steps) in schedules.items():
            rewards[k] = pool.dp_logistic_sgd(
                projected,
                dim=p,
                init=rng.uniform(-1, 1, size=p) / math.sqrt(p),
                noise_multiplier=sigma,
                clip_norm=c["clip"],
                sample_rate=rate,
                steps=steps,
                lr=c["lr"],
                expected_batch=float(batch),
                label="reward_dp_sgd",
                partition=PARTITION,
                part=k,
                batched=True,
            )
        return {"rewards": rewards}

    # -- synthesis ------------------------------------------------------------------------

    def cache_requests(self, ctx: MethodContext) -> list[dict[str, Any]]:
        """The candidates of ``finish``: they depend on the public prompts, the generator
        and the seed only, so the harness builds them once for every ε."""
        prompts, params, _ = self._candidate_settings(ctx)
        return [candidate_request(prompts, self.config["candidates"], params, STOP)]

    def _candidate_settings(
        self, ctx: MethodContext
    ) -> tuple[list[str], SamplingParams, np.random.Generator]:
        """Line 13's m public prompts (a seeded subset, in split order), the sampling
        settings, and the round's generator after the subset was drawn (finish goes on
        drawing the clusters from it)."""
        prompts = [str(r["prompt"]) for r in ctx.public if r.get("prompt")]
        rng = ctx.rng(3)
        order = rng.permutation(len(prompts))[: self.config["public_prompts"]]
        params = SamplingParams(
            max_new_tokens=self.config["max_new_tokens"],
            temperature=self.config["temperature"],
            seed=ctx.seed,
        )
        return [prompts[i] for i in np.sort(order)], params, rng

    def finish(self, ctx: MethodContext, state: dict[str, Any]) -> Artifact:
        """Lines 13–19: candidates on public prompts, ranked by a sampled cluster's reward."""
        c = self.config
        rewards = state["rewards"]
        if not rewards:  # every cluster fell below n_min: no reward to rank by
            return Artifact(kind=self.artifact_kind, pairs=[])
        prompts, params, rng = self._candidate_settings(ctx)
        writer = ctx.profile.preference_generator()
        responses = candidates(writer, prompts, c["candidates"], params, STOP)
        kept = sorted(rewards)
        weights = np.maximum(np.array([state["sizes"][k] for k in kept]), 0.0)
        clusters = rng.choice(kept, size=len(prompts), p=weights / weights.sum())
        options = [[o for o in row if o] for row in responses]
        flat = [prompt + o for prompt, row in zip(prompts, options, strict=True) for o in row]
        embeddings = ctx.profile.preference_embedder().embed(flat)
        features = project(embeddings, state["mean"], state["basis"], c["normalize"])
        pairs, start = [], 0
        for prompt, row, k in zip(prompts, options, clusters, strict=True):
            scores = features[start : start + len(row)] @ rewards[int(k)]
            start += len(row)
            if len(row) < 2:
                continue
            best, worst = int(np.argmax(scores)), int(np.argmin(scores))
            if best == worst or scores[best] - scores[worst] < c["gap"]:
                continue
            pairs.append({"prompt": prompt, "chosen": row[best], "rejected": row[worst]})
        return Artifact(kind=self.artifact_kind, pairs=pairs)
