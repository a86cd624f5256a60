"""An example third-party adapter, as a researcher would submit it with ``fedsynth submit``.

DP public-data selection: every client votes, with an L2-normalised vote vector, for the
public texts nearest to its own texts; the harness noises the summed votes; the top-k
public texts by noisy vote are released as the synthetic set. One release, user-level DP.
"""

import numpy as np

from benchmark.artifact import Artifact
from benchmark.method import Method
from benchmark.registry import METHODS


@METHODS.register("example_public_selection")
class PublicSelection(Method):
    name = "example_public_selection"
    artifact_kind = "texts"
    configs = {p: {"candidates": 200, "release": 50} for p in ("tiny", "cpu", "paper")}

    def num_rounds(self) -> int:
        return 1

    def setup(self, ctx):
        rng = ctx.rng(0)
        public = [r["text"] for r in ctx.public]
        picks = rng.choice(
            len(public), size=min(self.config["candidates"], len(public)), replace=False
        )
        return {"candidates": [public[i] for i in sorted(picks)]}

    def round(self, ctx, state, round_index):
        candidates = state["candidates"]
        embedder = ctx.profile.embedder()
        candidate_embeddings = embedder.embed(candidates)

        def vote(batch, payload):
            means = batch.memo_rows(
                "example.embeddings",
                lambda clients: np.stack([embedder.embed(c.texts).mean(0) for c in clients]),
            )
            nearest = np.argmax(means @ payload.T, axis=1)
            return np.eye(len(payload))[nearest]  # one vote each: L2 norm 1

        sigma = ctx.noise_for(steps=1)
        votes = ctx.pool.aggregate(
            vote,
            candidate_embeddings,
            dim=len(candidates),
            clip_norm=1.0,
            noise_multiplier=sigma,
            label="votes",
            batched=True,
        )
        state["votes"] = votes.noisy_sum
        return state

    def finish(self, ctx, state):
        order = np.argsort(-state["votes"])[: self.config["release"]]
        return Artifact("texts", texts=[state["candidates"][i] for i in order])
