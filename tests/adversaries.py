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


# The results store (issue 33, classes 9 and 10): what a submitter who can write to a copy
# of the store (a pull request, an unpacked bundle) does to it, holding at most a key of
# their own (``own``) or, to show that even an accepted key cannot launder an edit, the
# host's. Each returns the path it changed; tests/test_store_integrity.py checks that
# `leaderboard verify` (and the publish path) refuses every one.


def _entry_file(root: Path, method: str) -> Path:
    from leaderboard.store import entry_files

    [path] = [p for p in entry_files(root) if f"__{method}__" in p.name]
    return path


def _rewrite(path: Path, document: dict, key) -> None:
    """Write ``document`` signed by ``key`` with the raw signing primitive: a forger's
    signature, which skips every check the harness makes before it signs."""
    from leaderboard.signing import ALGORITHM, _signed_bytes, key_id

    body = {k: v for k, v in document.items() if k != "signature"}
    value = key.sign(_signed_bytes(body)).hex()
    signature = {"key_id": key_id(key.public_key()), "algorithm": ALGORITHM, "value": value}
    path.write_text(json.dumps({**body, "signature": signature}, indent=1, sort_keys=True))


def forge_refuted_entry(root: Path, method: str, bound: float, key) -> Path:
    """Class 9: an entry whose canary audit refutes its ε (as a release that leaked its
    canaries scores), its digest recomputed and signed all the same, and listed in the
    index, as if the harness had published it."""
    from leaderboard.entries import integrity_digest
    from leaderboard.signing import key_id
    from leaderboard.store_index import update_index

    path = _entry_file(root, method)
    entry = json.loads(path.read_text())
    n = len(entry["runs"])
    stats = {"n": n, "mean": bound, "std": 0.0, "ci_low": bound, "ci_high": bound}
    audit = {**stats, "confidence": 0.95, "values": [bound] * n}
    entry["audit"]["canary.epsilon_lower_bound"] = audit
    entry["integrity"] = integrity_digest(entry)
    _rewrite(path, entry, key)
    update_index(root, key, {key_id(key.public_key()): key.public_key()}, written=[path])
    return path


def edit_kept_record(root: Path, method: str, key) -> Path:
    """Class 10: a better score typed into a kept run record, re-signed with ``key``, so
    that a suite re-run builds the entry from it (re-submission)."""
    from leaderboard.store import record_files

    [path, *_] = [p for p in record_files(root) if f"__{method}__" in p.name]
    record = json.loads(path.read_text())
    record["metrics"] = {k: v + 0.25 for k, v in record["metrics"].items()}
    _rewrite(path, record, key)
    return path


def resign_with_own_key(root: Path, method: str, own) -> list[Path]:
    """Class 10: an entry and its kept records edited and re-signed with the submitter's
    own key, whose public half the store now carries in its own ``_keys/`` (as an unpacked
    submission bundle brings it), without anyone opting in to it."""
    from leaderboard.entries import build_entry
    from leaderboard.signing import export_public_key
    from leaderboard.store import record_files

    export_public_key(root, own.public_key())
    changed, records = [], []
    for path in record_files(root):
        if f"__{method}__" in path.name:
            record = json.loads(path.read_text())
            record["metrics"] = {k: v + 0.25 for k, v in record["metrics"].items()}
            _rewrite(path, record, own)
            records.append({k: v for k, v in record.items() if k != "signature"})
            changed.append(path)
    entry_path = _entry_file(root, method)
    version = json.loads(entry_path.read_text())["leaderboard_version"]
    _rewrite(entry_path, build_entry(records, version), own)
    return [*changed, entry_path]


def delete_entry(root: Path, method: str) -> Path:
    """Class 10: a rival's row removed from the table."""
    path = _entry_file(root, method)
    path.unlink()
    return path


def resubmit_entry(root: Path, method: str, key) -> Path:
    """Class 10: an entry re-submitted as a second row of its cell (another spec digest),
    validly signed by ``key`` but never through the publish path."""
    from leaderboard.entries import integrity_digest
    from leaderboard.store import entry_path

    entry = json.loads(_entry_file(root, method).read_text())
    head, _, digest = entry["entry_key"].rpartition("__")
    entry["entry_key"] = f"{head}__{digest[::-1]}"
    entry["integrity"] = integrity_digest(entry)
    path = entry_path(root, entry)
    _rewrite(path, entry, key)
    return path
