"""Adversarial adapters, one per attack class of issue 11, for the isolated path's tests.

Each is what a submitter wanting a better rank would write: it tries to see private data on
the server side, to change what the harness measures, or to leave something behind for the
next run. ``tests/test_isolation.py`` runs them with ``isolated=True`` and checks that each
is refused with a clear error or has no effect on what is released and recorded.
"""

import gc
import json
import os
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


# -- issue 33, class 4: crash and resume -------------------------------------------------


def nothing(client, payload):
    """Client side: a zero row, so the release is its noise alone."""
    return np.zeros(1)


@register("adv_crash_resume")
class CrashResume(Adversary):
    """Sees a release, keeps it in its work directory and dies with the harness (the test
    kills the coordinator); resumed, it asks the same position again: for a zero sum
    (``subtract``: the same noise would give the exact sum away), or for the same release,
    then a zero sum as a new one (``found`` holds the three values)."""

    configs = {"tiny": {"subtract": True}}

    def round(self, ctx, state, r):
        sigma = ctx.noise_for(steps=2)
        seen = ctx.work_dir / "first.json"
        if not seen.exists():  # the first attempt: the harness dies at the second call
            seen.write_text(json.dumps(self.aggregate(ctx, sigma).noisy_sum.tolist()))
            self.aggregate(ctx, sigma)
        first = json.loads(seen.read_text())
        if self.config["subtract"]:
            zero = self.zero(ctx, sigma, "r")
            state["found"] = [json.dumps({"sum": (np.array(first) - zero).tolist()})]
            return state
        again = self.aggregate(ctx, sigma).noisy_sum.tolist()
        fresh = self.zero(ctx, sigma, "fresh").tolist()
        state["found"] = [json.dumps({"first": first, "again": again, "fresh": fresh})]
        return state

    def zero(self, ctx, sigma, label):
        return ctx.pool.aggregate(
            nothing, dim=1, clip_norm=1.0, noise_multiplier=sigma, label=label
        ).noisy_sum


# -- issue 33, class 7: a refused run leaks to its re-run --------------------------------


def mark_and_measure(client, payload):
    """Client side: leave a mark that this release ran (in the client worker's own temp
    directory, which the test reads and the method process cannot), then measure."""
    import contextlib
    import tempfile

    with contextlib.suppress(OSError):  # the independence check's recomputation may not
        Path(tempfile.gettempdir(), f"ran-{payload}").touch()
    return mean_length(client, payload)


@register("adv_refused_rerun")
class RefusedRerun(Adversary):
    """Keeps what it saw in its work directory, then asks for a release the budget cannot
    afford (ε ≈ 10⁵); a re-run of the same submission that finds the stash releases it
    (what a refused run computed, under an honest ε)."""

    def round(self, ctx, state, r):
        stash = ctx.work_dir / "stash.json"
        if stash.exists():
            state["found"] = [stash.read_text()]
            return state
        sigma = ctx.noise_for(steps=1)
        legit = self.measure(ctx, sigma, "legit")
        stash.write_text(json.dumps(legit.tolist()))
        stash.write_text(json.dumps(self.measure(ctx, 1e-4, "blowout").tolist()))
        return state

    def measure(self, ctx, sigma, label):
        return ctx.pool.aggregate(
            mark_and_measure, label, dim=1, clip_norm=1.0, noise_multiplier=sigma, label=label
        ).noisy_sum
