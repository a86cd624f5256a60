"""Adversarial adapters, one per attack class of issue 11, for the isolated path's tests.

Each is what a submitter wanting a better rank would write: it tries to see private data on
the server side, to change what the harness measures, or to leave something behind for the
next run. ``tests/test_isolation.py`` runs them with ``isolated=True`` and checks that each
is refused with a clear error or has no effect on what is released and recorded.
"""

import gc
import json
import os
import re
from pathlib import Path

import numpy as np

from benchmark.artifact import Artifact
from benchmark.method import Method
from benchmark.registry import METHODS

STASH: list[str] = []  # what a client function keeps (module global)


def mean_length(client, payload):
    return np.array([np.mean([len(t) for t in client.texts]) / 100.0])


def keep_texts(client, payload):
    """Client side: copy the client's texts into a module global, for the server to read."""
    STASH.extend(client.texts)
    return mean_length(client, payload)


def mix_batch(batch, payload):
    """Batched: every row is the batch mean (each row depends on every client)."""
    lengths = np.array([[np.mean([len(t) for t in c.texts]) / 100.0] for c in batch.clients])
    return np.repeat(lengths.mean(axis=0, keepdims=True), len(lengths), axis=0)


def lengths_of_batch(batch, payload):
    """Batched and honest: each row from its own client."""
    return np.stack([mean_length(c, payload) for c in batch.clients])


def raise_with_text(client, payload):
    raise ValueError("leaked: " + client.texts[0])


class Adversary(Method):
    """One private aggregate, then ``attack`` on the server side; releases what it found."""

    artifact_kind = "texts"
    configs = {"tiny": {"target": ""}}

    def num_rounds(self):
        return 1

    def setup(self, ctx):
        return {"found": []}

    def round(self, ctx, state, r):
        sigma = ctx.noise_for(steps=1)
        self.aggregate(ctx, sigma)
        state["found"] = [str(x) for x in self.attack(ctx)]
        return state

    client_fn = staticmethod(mean_length)  # what the clients compute
    batched = False

    def payload(self, ctx):
        return None

    def aggregate(self, ctx, sigma):
        return ctx.pool.aggregate(
            self.client_fn,
            self.payload(ctx),
            dim=1,
            clip_norm=1.0,
            noise_multiplier=sigma,
            label="r",
            batched=self.batched,
        )

    def attack(self, ctx):
        return []

    def finish(self, ctx, state):
        return Artifact("texts", texts=state["found"] or ["nothing"])


def register(name):
    def decorate(cls):
        cls.name = name
        return METHODS.register(name)(cls)

    return decorate


@register("adv_global_stash")
class GlobalStash(Adversary):
    """A client function keeps its texts in a module global; the server reads it."""

    client_fn = staticmethod(keep_texts)

    def attack(self, ctx):
        return list(STASH)


@register("adv_pool_internals")
class PoolInternals(Adversary):
    """Server code reads the pool's private attributes."""

    def attack(self, ctx):
        return [r["text"] for shard in ctx.pool._records for r in shard]


@register("adv_gc_scan")
class GcScan(Adversary):
    """Server code looks for client data among all live objects."""

    def attack(self, ctx):
        found = []
        for obj in gc.get_objects():
            if type(obj).__name__ == "ClientData":
                found.extend(r["text"] for r in obj._records)
        return found


@register("adv_rewind")
class Rewind(Adversary):
    """Server code rewinds the pool's release counter so that noise repeats."""

    def attack(self, ctx):
        ctx.pool.load_state_dict({"release_index": 0})
        return []


@register("adv_read_file")
class ReadFile(Adversary):
    """Server code reads a file of the coordinator's (the split, the secret seed)."""

    def attack(self, ctx):
        return [Path(self.config["target"]).read_text()]


@register("adv_write_file")
class WriteFile(Adversary):
    """Server code writes where another run or the coordinator reads (a cache, a stash)."""

    def attack(self, ctx):
        Path(self.config["target"]).write_text("poisoned")
        return []


@register("adv_mix_batch")
class MixBatch(Adversary):
    """A batched client function computes every row from every client in the batch."""

    client_fn, batched = staticmethod(mix_batch), True


@register("adv_patch_harness")
class PatchHarness(Adversary):
    """Patches the accountant, the noise and the evaluator, and passes a float subclass as
    the noise multiplier that claims σ but would add none."""

    def aggregate(self, ctx, sigma):
        import benchmark.evaluation.base as evaluation
        import benchmark.federation.pool as pool
        import benchmark.privacy.accountants as accountants

        accountants.epsilon_from_ledger = lambda *a, **k: 0.01
        pool.clipped_row_sum = lambda rows, clip: np.zeros(rows.shape[1])
        evaluation.evaluate = lambda *a, **k: {"metrics": {"fake": {"score": 1.0}}}

        class Claim(float):
            def __mul__(self, other):
                return 0.0

            __rmul__ = __mul__

        return ctx.pool.aggregate(
            mean_length, None, dim=1, clip_norm=1.0, noise_multiplier=Claim(sigma), label="r"
        )


@register("adv_raise_message")
class RaiseMessage(Adversary):
    """A client function raises with a client's text in its message."""

    client_fn = staticmethod(raise_with_text)


@register("adv_environment")
class Environment(Adversary):
    """Server code looks for secrets in its environment and in the coordinator's process."""

    def attack(self, ctx):
        found = [f"{k}={v}" for k, v in os.environ.items()]
        try:
            found.append(Path(f"/proc/{os.getppid()}/environ").read_bytes().decode())
        except PermissionError:
            found.append("refused")
        return found


@register("adversary_baseline")
class Baseline(Adversary):
    """The honest counterpart of the adversaries (same release, no attack)."""


@register("adv_claims_bound")
class ClaimsBound(Adversary):
    """Claims the role of a bound, which anchors every entry's gap-closed scale."""

    role = "bound"


def released(result):
    return json.dumps(result.artifact.texts)


@register("adv_mix_batch_alone_ok")
class HonestBatch(Adversary):
    """An honest batched release (each row from its own client): the independence check's
    recomputations run, in the sandboxed zygote."""

    client_fn, batched = staticmethod(lengths_of_batch), True


def write_to(client, payload):
    """Client side: write the client's texts where the server can read them."""
    Path(payload).write_text("\n".join(client.texts))
    return mean_length(client, payload)


@register("adv_client_writes")
class ClientWrites(Adversary):
    """Client code writes its texts into the method's work directory for the server."""

    client_fn = staticmethod(write_to)

    def payload(self, ctx):
        return str(ctx.work_dir / "stash.txt")


@register("adv_rebuilt_corpus")
class RebuiltCorpus(Adversary):
    """Issue 33, class 6: releases private texts it got from the data's own source (a demo
    split rebuilt from a package corpus) as its "synthetic" set. The sandbox closes that read;
    here the texts come in through the spec (``texts``), the test's stand-in for the corpus."""

    configs = {"tiny": {"texts": []}}

    def finish(self, ctx, state):
        return Artifact("texts", texts=list(self.config["texts"]))


# The form of the marker canaries before issue 33: one record of eight words of 3-12 letters
# drawn from the public vocabulary, lower case, no punctuation.
MARKER = re.compile(r"(?:[a-z]{3,12} ){7}[a-z]{3,12}")


def looks_like_canary(texts):
    """Issue 33, class 9's recogniser: a unit whose only text has the markers' form."""
    return len(texts) == 1 and MARKER.fullmatch(texts[0]) is not None


@register("adv_drops_canaries")
class DropsCanaries(Adversary):
    """Issue 33, class 9: releases every unit's texts except those of units it takes for
    canaries, so that the canary audit sees nothing. ``units`` (one list of texts per unit of
    the run) stands for what a leak around the pool delivered (channels the sandbox closes)."""

    configs = {"tiny": {"units": []}}

    def finish(self, ctx, state):
        kept = [t for texts in self.config["units"] if not looks_like_canary(texts) for t in texts]
        return Artifact("texts", texts=kept)
