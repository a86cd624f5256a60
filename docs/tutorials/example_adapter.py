"""A worked method adapter, as a researcher submits it: ``fedsynth submit example_adapter.py``.

The tutorial docs/tutorials/write-an-adapter.md walks through it; tests/test_submit.py and
tests/test_suite_tiny.py submit this very file on the tiny suite, so it cannot rot.

The method, DP public-data selection: every client votes, with one L2-normalised vote, for
the public text nearest to its own texts; the harness clips, sums and noises the votes; the
top public texts by noisy vote are released as the synthetic set. One release, user-level DP.
"""

import numpy as np

from benchmark.api import METHODS, Artifact, Method


@METHODS.register("example_public_selection")  # the file must register exactly one method
class PublicSelection(Method):
    name = "example_public_selection"
    artifact_kind = "texts"  # the evaluator fine-tunes the suite's on-device LM on them
    # One default config per model profile; a suite's params override them by name.
    configs = {p: {"candidates": 200, "release": 50} for p in ("tiny", "cpu", "paper")}
    # The profile's models this code loads: fetched before the sandbox starts; no other.
    models = ("embedder",)

    def num_rounds(self) -> int:
        return 1

    def setup(self, ctx):
        # Server side: public data and seeded method randomness only (ctx.rng is the same
        # on resume). The state returned here is pickled after every round.
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

        # Client side: runs on each sampled client's private texts, in the harness's
        # sandboxed client worker. It returns one vector per client; nothing else leaves.
        def vote(batch, payload):
            means = batch.memo_rows(
                "example.embeddings",
                lambda clients: np.stack([embedder.embed(c.texts).mean(0) for c in clients]),
            )
            nearest = np.argmax(means @ payload.T, axis=1)
            return np.eye(len(payload))[nearest]  # one vote each: L2 norm 1

        # The noise that keeps this one release within the run's (ε, δ); the harness
        # recomputes ε from its ledger afterwards and fails a run that overspends.
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
        state["votes"] = votes.noisy_sum  # clipped, summed, noised, recorded: all we get
        return state

    def finish(self, ctx, state):
        order = np.argsort(-state["votes"])[: self.config["release"]]
        return Artifact("texts", texts=[state["candidates"][i] for i in order])
