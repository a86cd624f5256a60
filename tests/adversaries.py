"""Adversarial adapters, one per attack class of issue 11, for the isolated path's tests.

Each is what a submitter wanting a better rank would write: it tries to see private data on
the server side, to change what the harness measures, or to leave something behind for the
next run. ``tests/test_isolation.py`` runs them with ``isolated=True`` and checks that each
is refused with a clear error or has no effect on what is released and recorded.
"""

import contextlib
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
        # the parent's pid (0 where the process is the first of its own PID namespace), and
        # the host's first process (an ancestor of the coordinator)
        for pid in {os.getppid(), 1}:
            try:
                found.append(Path(f"/proc/{pid}/environ").read_bytes().decode())
            except OSError:
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


LEFT_NAME = "fedsynth-left-for-later"  # what one run's client code leaves for another's


def _places_to_leave():
    """Every directory a process of a run might write and a later run's might read."""
    import tempfile

    places = {tempfile.gettempdir(), os.getcwd(), "/tmp", "/var/tmp", "/dev/shm"}
    places |= {os.environ.get(name, "/") for name in ("HOME", "TMPDIR", "XDG_CACHE_HOME")}
    here = Path(tempfile.gettempdir())
    return sorted(places | {str(p) for p in here.parents})


def leave_for_later(client, payload):
    """Client side: write the client's texts into every such directory it can (and fail,
    LookupError, where it could write none)."""
    wrote = 0
    for place in _places_to_leave():
        with contextlib.suppress(OSError):
            wrote += (Path(place) / LEFT_NAME).write_text("\n".join(client.texts))
    if not wrote:
        raise LookupError("nowhere to write")
    return mean_length(client, payload)


def find_left(roots):
    """Whatever a run left under ``roots`` (or in the usual places) that this process can
    read."""
    found = []
    for root in {*roots, *_places_to_leave()}:
        with contextlib.suppress(OSError):
            for path in Path(root).rglob(LEFT_NAME):
                with contextlib.suppress(OSError):
                    found.append(path.read_text())
    return found


@register("adv_leave_for_later")
class LeaveForLater(Adversary):
    """Issue 33, colluding runs: client code leaves its texts wherever it can write."""

    client_fn = staticmethod(leave_for_later)


@register("adv_find_left")
class FindLeft(Adversary):
    """Issue 33, colluding runs: a later run's method process looks for what an earlier
    run's client code left, under the runs root (``roots``) and the usual places."""

    configs = {"tiny": {"roots": []}}

    def attack(self, ctx):
        return find_left(self.config["roots"] + [str(ctx.work_dir.parents[2])])


@register("adv_many_models")
class ManyModels(Adversary):
    """Issue 33, item 12: declares hub models by id for the coordinator to download, as
    many and as large as it likes."""

    configs = {"tiny": {"hub_ids": []}}

    @classmethod
    def hub_ids(cls, config):
        return tuple(config["hub_ids"])


LEFT = "fedsynth-left-behind"


def leaves_state(client, payload):
    """1 if an earlier call left something this call can find, else 0; then leaves state
    itself: a file in its temporary directory and beside it, an imported module, a daemon
    that keeps a file there. With ``payload`` (a directory's name), only where the
    temporary directory is under one of that name (elsewhere: 0, and nothing left)."""
    import sys
    import tempfile
    import time

    tmp = Path(tempfile.gettempdir())
    if payload is not None and payload not in tmp.parts:
        return np.array([0.0])
    places = [tmp / LEFT, tmp.parent / LEFT]
    seen = any(p.exists() for p in places) or "tabnanny" in sys.modules
    for place in places:
        with contextlib.suppress(OSError):
            place.write_text("x")
    import tabnanny  # noqa: F401  (a module neither the harness nor its libraries import)

    if os.fork() == 0:  # a child that rewrites the file after the call ended
        os.setsid()
        for _ in range(50):
            time.sleep(0.02)
            for place in places:
                with contextlib.suppress(OSError):
                    place.write_text("x")
        os._exit(0)
    return np.array([float(seen)])


@register("adv_recompute_state")
class RecomputeState(Adversary):
    """Issue 33, class 3, on the isolated path: ``leaves_state`` in the independence
    check's processes only (the client worker answers 0), over two releases."""

    client_fn = staticmethod(leaves_state)

    def num_rounds(self):
        return 2

    def round(self, ctx, state, r):
        self.aggregate(ctx, ctx.noise_for(steps=2))
        return state

    def payload(self, ctx):
        return "recompute_tmp"


@register("adv_client_writes")
class ClientWrites(Adversary):
    """Client code writes its texts into the method's work directory for the server."""

    client_fn = staticmethod(write_to)

    def payload(self, ctx):
        return str(ctx.work_dir / "stash.txt")


# --- issue 33: side outputs of client code (class 5) and its timing and requests (class 11) ---
# Each client function below encodes the first character of its client's private text in
# something other than its row; tests/test_side_outputs.py runs each on two splits that
# differ only in that character and checks what the method, the record and the operator's
# log get is the same.


def first_letter(client):
    return client.texts[0][0]


def raise_named_after_text(client, payload):
    """The exception's class is named after the private text (its message is the text)."""
    name = "leak_" + "".join(c if c.isalnum() else "_" for c in client.texts[0][:40])
    raise type(name, (Exception,), {})(client.texts[0])


def exit_with_letter(client, payload):
    """The worker exits with the letter as its exit code."""
    os._exit(ord(first_letter(client)))


def sleep_by_letter(client, payload):
    """Runs longer for one letter than for another (0.5 s per client for 'w')."""
    import time

    time.sleep(0.5 if first_letter(client) == "w" else 0.0)
    return mean_length(client, payload)


def rewrite_reports(client, payload):
    """Patches the worker's own messages so that every header it sends carries counts
    made from the private text (what the worker once reported as payload counts)."""
    from benchmark.untrusted import client_worker

    send = client_worker.wire.send
    letter = ord(first_letter(client))

    def send_with_counts(stream, header, *blobs):
        return send(
            stream, {**header, "floats": letter, "texts": letter, "seconds": letter}, *blobs
        )

    client_worker.wire.send = send_with_counts
    return mean_length(client, payload)


def shape_by_letter(client, payload):
    """A row whose length is the letter's code point (the method declared dim 1)."""
    return np.zeros(ord(first_letter(client)))


class _ArrayLike:
    """Not an array: numpy asks it for one (``__array__``), and it answers after the text."""

    def __init__(self, text):
        self.text = text

    def __array__(self, dtype=None, copy=None):
        return np.zeros(ord(self.text[0]))

    def __reduce__(self):  # were it pickled on the trusted side, the text would travel
        return (_ArrayLike, (self.text,))


def array_like_by_letter(client, payload):
    """An object with ``__array__`` and a pickling hook, whose array's length is the
    letter's code point."""
    return _ArrayLike(client.texts[0])


def dtype_named_after_text(batch, payload):
    """Batched: a structured array whose field name is the private text."""
    name = "".join(c for c in batch.clients[0].texts[0] if c.isalnum())
    return np.zeros(len(batch.clients), dtype=[(name, "f8")])


def print_texts(client, payload):
    """Prints the private text (to the worker's stdout and stderr)."""
    import sys

    print("PRINTED", client.texts[0])
    print("PRINTED", client.texts[0], file=sys.stderr)
    return mean_length(client, payload)


def tell_branch_flush(client, payload):
    """Says, by the class of the exception it raises (the one thing about a failure that
    leaves the worker), whether this process's indirect branch predictors are flushed on
    every switch: PermissionError if so, LookupError if not."""
    status = Path("/proc/self/status").read_text()
    line = next(x for x in status.splitlines() if x.startswith("SpeculationIndirectBranch"))
    raise (PermissionError if line.endswith("force disabled") else LookupError)(line)


@register("adv_failing_client")
class FailingClient(Adversary):
    """Runs the failing client function named in its config (one of those above, batched or
    not) through the pool, from the method process: the refusal is what reaches the method
    and the operator."""

    configs = {"tiny": {"fn": "raise_with_text", "batched": False}}

    def aggregate(self, ctx, sigma):
        self.client_fn, self.batched = globals()[self.config["fn"]], self.config["batched"]
        return super().aggregate(ctx, sigma)


class SlowToSave:
    """A memo whose saving (a checkpoint's, in the worker) takes 0.5 s."""

    def __reduce__(self):
        import time

        time.sleep(0.5)
        return (SlowToSave, ())


def slow_memos_for_w(client, payload):
    """Keeps a memo that is slow to save for 'w' (5 s over ten clients), none for 'v'."""
    if first_letter(client) == "w":
        client.memo("slow", lambda c: SlowToSave())
    return mean_length(client, payload)


@register("adv_sleep_by_letter")
class SleepByLetter(Adversary):
    """Its server side is one call at a fixed noise (no accountant to solve), so nearly
    all of its run is the clients' time."""

    client_fn = staticmethod(sleep_by_letter)

    def round(self, ctx, state, r):
        self.aggregate(ctx, 5.0)
        return state


@register("adv_slow_memos_by_letter")
class SlowMemosByLetter(SleepByLetter):
    """The clients' time spent where the runner asks for their memos, for the checkpoint."""

    client_fn = staticmethod(slow_memos_for_w)


def sleep_for_w(client, payload):
    """0.05 s per client for 'w', none for 'v' (half a second over ten clients)."""
    import time

    time.sleep(0.05 if first_letter(client) == "w" else 0.0)
    return mean_length(client, payload)


@register("adv_times_its_calls")
class TimesItsCalls(Adversary):
    """Times a pool call by the clock, and by a thread that counts while the call is served
    (its rate against the rate before the call, which contention or a stop lowers), and
    releases both: client code sleeps for one letter and not for the other. With ``warm``
    it times a second call (the first also starts the client side, which is slower and
    more variable)."""

    configs = {"tiny": {"target": "", "warm": False}}
    client_fn = staticmethod(sleep_for_w)

    def round(self, ctx, state, r):
        import threading
        import time

        if self.config["warm"]:
            self.aggregate(ctx, 5.0)
        count, stop = [0], threading.Event()

        def spin():
            while not stop.is_set():
                count[0] += 1

        thread = threading.Thread(target=spin)
        thread.start()
        time.sleep(0.2)
        before, began = count[0], time.monotonic()
        self.aggregate(ctx, 5.0)
        elapsed, during = time.monotonic() - began, count[0] - before
        stop.set()
        thread.join()
        state["found"] = [f"{elapsed:.1f}", f"{(during / elapsed) / (before / 0.2):.2f}"]
        return state


def big_memo_for_w(client, payload):
    """Keeps a 10 MB memo for 'w' (100 MB over ten clients), none for 'v'."""
    if first_letter(client) == "w":
        client.memo("big", lambda c: np.ones(10 << 17))
    return mean_length(client, payload)


@register("adv_times_its_checkpoints")
class TimesItsCheckpoints(Adversary):
    """Times the gap between its rounds, where the runner writes the round's checkpoint,
    which holds the clients' memos (large for one letter), and releases it."""

    client_fn = staticmethod(big_memo_for_w)

    def num_rounds(self):
        return 2

    def round(self, ctx, state, r):
        import time

        if r == 1:
            state["found"] = [f"{time.monotonic() - state['ended']:.3f}"]
        self.aggregate(ctx, 5.0)
        state["ended"] = time.monotonic()
        return state


@register("adv_rewrite_reports")
class RewriteReports(Adversary):
    client_fn = staticmethod(rewrite_reports)


@register("adv_prints")
class Prints(Adversary):
    client_fn = staticmethod(print_texts)


@register("adv_cache_flood")
class CacheFlood(Adversary):
    """Asks the coordinator to generate 20,000 prompts x 64 public texts (1.28 M, past the
    1 M bound) before setup: the trusted side's memory and time, spent for the method."""

    def cache_requests(self, ctx):
        prompts = [f"prompt {i}" for i in range(20_000)]
        params = [4096, 1.0, 1.0, 0]
        return [
            {"kind": "candidates", "prompts": prompts, "count": 64, "params": params, "stop": []}
        ]


@register("adv_huge_dim")
class HugeDim(Adversary):
    """Declares a 2**40-dimensional release: the pool would allocate 8 TB to sum it."""

    def aggregate(self, ctx, sigma):
        return ctx.pool.aggregate(
            mean_length, None, dim=2**40, clip_norm=1.0, noise_multiplier=sigma, label="r"
        )


@register("adv_big_payload")
class BigPayload(Adversary):
    """Sends a 4 MB payload (refused when the operator bounds messages below that)."""

    def payload(self, ctx):
        return np.ones(1 << 19)


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
    """Client side: leave a mark that this release ran (printed: the client worker's output
    goes to the run's private log, which the test reads and the method process cannot),
    then measure."""
    print(f"ran-{payload}", flush=True)
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


def touch(how, path):
    """Read a file (``how == "read"``), drop its pages from the page cache (``"evict"``)
    or look a name up (``"stat"``; most do not exist)."""
    if how == "read":
        Path(path).read_bytes()
    elif how == "evict":
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.stat(path)


def touch_paths(client, payload):
    """Client side: touch the paths ``payload`` names (the choice could follow the data)."""
    how, paths = payload
    for path in paths:
        touch(how, path)
    return mean_length(client, payload)


@register("adv_page_cache")
class PageCache(Adversary):
    """Client code reads some of a list of files that are out of the page cache; after the
    call the method process times its own first read of each, and releases the fastest
    half: the files client code read (the page cache as a channel, found in issue 33)."""

    how = probe = "read"  # what client code does to its files; how the method times all
    configs = {"tiny": {"files": [], "read": []}}
    client_fn = staticmethod(touch_paths)

    def payload(self, ctx):
        return [self.how, self.config["read"]]

    def attack(self, ctx):
        import time

        took = {}
        files = self.config["files"]
        if files:  # the first lookup is slow whatever the cache holds: one of another name
            touch("stat", os.path.join(os.path.dirname(files[0]), os.urandom(8).hex()))
        for path in files:
            began = time.perf_counter_ns()
            touch(self.probe, path)
            took[path] = time.perf_counter_ns() - began
        return sorted(took, key=took.get)[: len(took) // 2]


@register("adv_lookups")
class Lookups(PageCache):
    """The same with names that do not exist: client code looks some up, which leaves
    negative entries in the kernel's directory cache, and the method process's own
    lookups of those names are faster (found in issue 33)."""

    how = probe = "stat"


@register("adv_evictions")
class Evictions(PageCache):
    """Client code drops some files from the page cache (``POSIX_FADV_DONTNEED``, which
    any reader may ask); the method process's first reads are slow for exactly those."""

    how = "evict"


REGION = 64 << 10  # one probe of the CPU's caches


def _regions(path, offsets):
    """The file's bytes at ``offsets`` as 64-bit words, through a shared read-only mapping
    (the page cache's pages: physical memory every process that maps the file shares)."""
    import mmap

    with open(path, "rb") as file:
        mapping = mmap.mmap(file.fileno(), 0, prot=mmap.PROT_READ)
    words = np.frombuffer(mapping, dtype=np.uint64)
    return [words[o // 8 : (o + REGION) // 8] for o in offsets]


def touch_regions(regions):
    """Read ``regions`` three times, so their lines are in the CPU's caches afterwards."""
    for _ in range(3):
        for region in regions:
            region.sum()


def touch_lines(client, payload):
    """Client side: read some regions of a shared file, so their lines are in the CPU's
    caches when the call ends (the choice could follow the data)."""
    path, offsets = payload
    touch_regions(_regions(path, offsets))
    return mean_length(client, payload)


def mapped_for_timing(path, offsets):
    """``_regions``, their page tables filled but not their lines (faults are not timed)."""
    regions = _regions(path, offsets)
    for region in regions:
        region[:: 4096 // 8].sum()
    return regions


def evict_own_lines():
    np.ones(128 << 20, dtype=np.uint8).sum()


def fastest_half(regions):
    """The keys of the half of ``regions`` (key: region) this process copies fastest, timed
    in a random order (a copy: bound by the memory, not by arithmetic)."""
    import random
    import time

    took, scratch = {}, np.empty(REGION // 8, dtype=np.uint64)
    for key in random.sample(list(regions), len(regions)):
        began = time.perf_counter_ns()
        np.copyto(scratch, regions[key])
        took[key] = time.perf_counter_ns() - began
    return sorted(took, key=took.get)[: len(took) // 2]


@register("adv_cpu_caches")
class CpuCaches(Adversary):
    """Client code reads half of 16 regions of a file both processes map (its pages are
    shared memory); after the call the method process times its own first read of each
    region and releases the fastest half: the regions whose lines client code left in the
    CPU's caches (flush and reload; found in issue 33)."""

    configs = {"tiny": {"file": "", "offsets": [], "read": []}}
    client_fn = staticmethod(touch_lines)

    def payload(self, ctx):
        self.regions = mapped_for_timing(self.config["file"], self.config["offsets"])
        evict_own_lines()
        return [self.config["file"], self.config["read"]]

    def attack(self, ctx):
        return fastest_half(dict(zip(self.config["offsets"], self.regions, strict=True)))


@register("adv_speculation")
class Speculation(Adversary):
    """Releases how the kernel treats its branch predictors (``/proc/self/status``): a
    method process whose indirect branch predictors are not flushed on a switch could time
    branches client code trained."""

    def attack(self, ctx):
        lines = Path("/proc/self/status").read_text().splitlines()
        return [line for line in lines if line.startswith("SpeculationIndirectBranch")]


@register("adv_fails_to_start")
class FailsToStart(Adversary):
    """Fails before the method process's first answer (its number of rounds)."""

    def num_rounds(self):
        raise RuntimeError("no rounds today")


# --- issue 33: channels out of the client worker, state, the corpus, processes left over ----

ABSTRACT_NAME, SHM_KEY, MQ_NAME = b"\0fedsynth-adv", 0xFED5, b"/fedsynth-adv"
NETLINK_USERSOCK, NETLINK_PORT = 2, 0xFED5  # netlink between user processes, by port id
ETHERTYPE = 0x88B5  # an experimental ethertype: frames on the loopback device
INET6 = ("udp6", "tcp6")
HEADER_BYTES = {"netlink": 16, "packet": 14}  # nlmsghdr; an ethernet header: not the text
SCRATCH_NAME = "fedsynth-adv"  # a file client code writes in its scratch directory


def _libc():
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmat.restype = ctypes.c_void_p
    return libc


def _checked(result):
    import ctypes

    if result in (-1, None) or (isinstance(result, int) and result < 0):
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))
    return result


def _lock_target():
    return np.__file__  # a file every sandbox may read


def atime_target():
    """A file every sandbox may read and nothing else reads during a run."""
    return str(Path(np.__file__).parent / "_pyinstaller" / "__init__.py")


# The host's counters client code moves, as the method process would read them: free
# memory (sysinfo), free blocks of the file system the worker writes (statfs), CPU time
# (/proc/stat), open files (/proc/sys) and disk sectors (/sys).
COUNTERS = {
    "procstat": "/proc/stat",
    "meminfo": "/proc/meminfo",
    "filenr": "/proc/sys/fs/file-nr",
    "sysfs": str(min(Path("/sys/block").glob("*/stat"), default="/sys/kernel/uevent_seqnum")),
}


def read_counter(kind):
    """One reading of counter ``kind`` (raises PermissionError where the sandbox denies it)."""
    import ctypes

    if kind in COUNTERS:
        return Path(COUNTERS[kind]).read_text()
    if kind == "statfs":
        return os.statvfs("/").f_bfree
    buffer = ctypes.create_string_buffer(256)  # struct sysinfo
    return _checked(_libc().sysinfo(buffer)) or buffer.raw


def move_counters(text):
    """Client side: move every counter by ``text``: hold memory (64 KB a character), write a
    file (4 KB a character), spin (0.1 ms a character)."""
    import tempfile
    import time

    HELD.append(np.ones(len(text) << 16, dtype=np.uint8))  # written: resident
    with tempfile.NamedTemporaryFile(delete=False) as scratch:
        scratch.write(os.urandom(len(text) << 12))
    began = time.perf_counter()
    while time.perf_counter() - began < len(text) / 10_000:
        pass


def _frames(kind):
    """A socket that sends and receives ``kind``: netlink messages to ``NETLINK_PORT``, or
    raw ``ETHERTYPE`` frames on the loopback device (a sniffer sees every host process's)."""
    import socket

    if kind == "netlink":
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_USERSOCK)
        sock.bind((NETLINK_PORT, 0))
        return sock
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETHERTYPE))
    sock.bind(("lo", ETHERTYPE))
    return sock


def host_listeners(stack):
    """Outside any sandbox, listeners for every channel a host process could hear
    (``HEARD``), each shown to receive a probe sent from here first: IPv6 only where the
    host has ``::1``, raw frames only where this process may sniff them. Returns the inet
    port and ``{kind: listener}``, closed by ``stack``."""
    import socket

    stream = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
    stream.bind(("127.0.0.1", 0))  # every inet listener shares its port number
    port, listeners = stream.getsockname()[1], {"tcp": stream}
    for kind in HEARD:
        if kind == "tcp":
            continue
        if kind in ("netlink", "packet"):
            with contextlib.suppress(PermissionError):  # raw frames need CAP_NET_RAW
                listeners[kind] = stack.enter_context(_frames(kind))
            continue
        family = socket.AF_INET6 if kind in INET6 else socket.AF_INET
        sock = stack.enter_context(socket.socket(family, 1 if kind == "tcp6" else 2))
        try:
            sock.bind(("::1" if kind in INET6 else "127.0.0.1", port))
        except OSError:
            if kind in INET6:  # no IPv6 loopback on this host
                continue
            raise
        listeners[kind] = sock
    for kind, sock in listeners.items():
        if kind.startswith("tcp"):
            sock.listen()
        send(kind, "probe", port)
        assert heard(kind, sock) == "probe", kind
        while heard(kind, sock) is not None:  # a frame's outgoing copy is seen too
            pass
    return port, listeners


def heard(kind, listener):
    """What ``listener`` (``host_listeners``) received, or None within 0.2 s."""
    listener.settimeout(0.2)
    try:
        if kind.startswith("tcp"):
            connection = listener.accept()[0]
            with connection:
                connection.settimeout(0.2)
                return connection.recv(1 << 16).decode()
        return listener.recv(1 << 16)[HEADER_BYTES.get(kind, 0) :].decode()
    except TimeoutError:
        return None


HEARD = ["udp", "tcp", *INET6, "netlink", "packet"]


def open_channel(kind, port=None):
    """Server side: the receiving end of a channel from the client worker (``port``: the
    listener's, or a host process's pid)."""
    import socket

    libc = _libc()
    if kind in ("udp", "tcp", *INET6):
        family, host = (socket.AF_INET6, "::1") if kind in INET6 else (socket.AF_INET, "127.0.0.1")
        sock = socket.socket(family, socket.SOCK_DGRAM if kind.startswith("udp") else 1)
        sock.bind((host, 0))
        return sock
    if kind in ("netlink", "packet"):
        return _frames(kind)
    if kind == "kmsg":  # the kernel's log, read from its end (what is written after)
        fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
        os.lseek(fd, 0, os.SEEK_END)
        return fd
    if kind == "abstract":
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(ABSTRACT_NAME)
        return sock
    if kind == "shm":
        return _checked(libc.shmget(SHM_KEY, 1 << 16, 0o1000 | 0o600))  # IPC_CREAT
    if kind == "sem":  # one SysV semaphore at 0: a client's semop raises it
        return _checked(libc.semget(SHM_KEY, 1, 0o1000 | 0o600))
    if kind == "mq":
        return _checked(
            libc.mq_open(MQ_NAME, os.O_CREAT | os.O_RDONLY | os.O_NONBLOCK, 0o600, None)
        )
    if kind == "flock":
        return os.open(_lock_target(), os.O_RDONLY)
    if kind == "atime":  # a read moves a file's access time, which anyone may stat
        return os.stat(atime_target()).st_atime_ns
    if kind in (*COUNTERS, "statfs", "sysinfo"):
        return read_counter(kind)
    if kind == "proc":  # the host's processes, e.g. the coordinator's (public: its pid)
        return Path(f"/proc/{port}")
    if kind == "scratch":  # the client side's scratch, beside this process's own work dir
        return Path(os.environ["TMPDIR"]).parents[1] / "client_tmp" / SCRATCH_NAME  # work/tmp
    raise ValueError(kind)


def receive(kind, endpoint):
    """Server side: what the clients sent through ``endpoint``."""
    import ctypes
    import fcntl

    libc = _libc()
    if kind in ("udp", "tcp", "abstract", *INET6, "netlink", "packet"):
        endpoint.settimeout(0.5)
        return endpoint.recv(1 << 16)[HEADER_BYTES.get(kind, 0) :].decode()
    if kind == "kmsg":
        told = []
        with contextlib.suppress(BlockingIOError):
            while record := os.read(endpoint, 8192):
                told.append(record.decode().split(";", 1)[-1].strip())
        return "\n".join(told)
    if kind == "shm":
        return ctypes.string_at(_checked(libc.shmat(endpoint, None, 0))).decode()
    if kind == "sem":
        value = _checked(libc.semctl(endpoint, 0, 12))  # GETVAL
        return f"raised to {value}: bit 1" if value else "bit 0"
    if kind == "mq":
        buffer = ctypes.create_string_buffer(1 << 13)
        size = _checked(libc.mq_receive(endpoint, buffer, len(buffer), None))
        return buffer.raw[:size].decode()
    if kind == "flock":
        try:
            fcntl.flock(endpoint, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return "a client holds the lock: bit 1"
        return "bit 0"
    if kind == "atime":
        moved = os.stat(atime_target()).st_atime_ns != endpoint
        return "a client read the file: bit 1" if moved else "bit 0"
    if kind in (*COUNTERS, "statfs", "sysinfo"):
        return "the clients moved it" if read_counter(kind) != endpoint else "unmoved"
    if kind == "proc":  # client code's processes would show here, and the host's pid count
        return f"the host's process {endpoint.name} exists" if endpoint.exists() else "none"
    if kind == "scratch":  # Landlock refuses reading it, not stat
        return f"a file of {os.stat(endpoint).st_size} bytes"
    raise ValueError(kind)


HELD = []  # what a client function keeps open in the worker (a lock)


def send(kind, text, port):
    """Client side: ``text`` out through channel ``kind``."""
    import ctypes
    import fcntl
    import socket
    import struct

    libc, data = _libc(), text.encode()
    if kind == "udp":
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(data, ("127.0.0.1", port))
    elif kind == "tcp":
        socket.create_connection(("127.0.0.1", port), timeout=1).sendall(data)
    elif kind == "udp6":
        socket.socket(socket.AF_INET6, socket.SOCK_DGRAM).sendto(data, ("::1", port))
    elif kind == "tcp6":
        socket.create_connection(("::1", port), timeout=1).sendall(data)
    elif kind == "netlink":
        header = struct.pack("=IHHII", 16 + len(data), 0, 0, 0, 0)  # nlmsghdr
        socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_USERSOCK).sendto(
            header + data, (NETLINK_PORT, 0)
        )
    elif kind == "packet":
        _frames(kind).send(bytes(12) + struct.pack("!H", ETHERTYPE) + data)
    elif kind == "kmsg":
        Path("/dev/kmsg").write_bytes(data.replace(b"\n", b" ")[:900] + b"\n")
    elif kind == "abstract":
        socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(data, ABSTRACT_NAME)
    elif kind == "shm":
        address = _checked(libc.shmat(_checked(libc.shmget(SHM_KEY, 0, 0)), None, 0))
        ctypes.memmove(address, data + b"\0", len(data) + 1)
    elif kind == "sem":  # struct sembuf {sem_num 0, sem_op +1, sem_flg 0}
        operation = ctypes.create_string_buffer(bytes([0, 0, 1, 0, 0, 0]))
        _checked(libc.semop(_checked(libc.semget(SHM_KEY, 0, 0)), operation, 1))
    elif kind == "mq":
        queue = _checked(libc.mq_open(MQ_NAME, os.O_WRONLY | os.O_NONBLOCK))
        _checked(libc.mq_send(queue, data, len(data), 0))
    elif kind == "flock":
        fd = os.open(_lock_target(), os.O_RDONLY)
        fcntl.flock(fd, fcntl.LOCK_SH)
        HELD.append(fd)
    elif kind == "atime":
        Path(atime_target()).read_bytes()
    elif kind in (*COUNTERS, "statfs", "sysinfo"):
        move_counters(text)
    elif kind == "scratch":
        import tempfile

        (Path(tempfile.gettempdir()) / SCRATCH_NAME).write_text(text)


def send_texts(client, payload):
    """Client side: send the client's texts through every channel, to the server or a
    listener outside the run, quietly (the release goes on whatever happened)."""
    for kind in payload["channels"]:
        with contextlib.suppress(Exception):
            send(kind, "\n".join(client.texts), payload["port"])
    return mean_length(client, payload)


def _attempt(outcomes, label, action):
    try:
        return action()
    except Exception as exc:
        outcomes.append(f"{label}: refused: {type(exc).__name__}")
        return None


@register("adv_channel")
class Channel(Adversary):
    """The client worker sends its texts through sockets (inet and inet6 udp and tcp,
    netlink, raw frames, abstract unix), the kernel's log, a SysV shared memory segment and
    semaphore, a POSIX message queue, a lock on a file both sides can read, that file's
    access time (a read), the host's counters (memory held, a file written, CPU spun) and a
    file in its scratch directory, whose size a ``stat`` shows; the method process listens
    on each (reads each counter before and after the call) and releases what it received."""

    configs = {"tiny": {"channels": ["udp"], "port": 9}}
    client_fn = staticmethod(send_texts)

    def payload(self, ctx):
        return {"channels": self.config["channels"], "port": self.config["port"]}

    def round(self, ctx, state, r):
        outcomes, endpoints = [], {}
        for kind in self.config["channels"]:
            endpoints[kind] = _attempt(
                outcomes, kind, lambda kind=kind: open_channel(kind, self.config["port"])
            )
        self.aggregate(ctx, ctx.noise_for(steps=1))
        for kind, endpoint in endpoints.items():
            if endpoint is not None:
                got = _attempt(outcomes, kind, lambda k=kind, e=endpoint: receive(k, e))
                if got is not None:
                    outcomes.append(f"{kind}: {got}")
        state["found"] = outcomes
        return state


def read_denied(client, payload):
    """Client side: read the corpus the split was cut from (raises RuntimeError if any
    denied file could be read); the allowed files must read (else PermissionError)."""
    for path in payload["allowed"]:
        Path(path).read_bytes()
    for path in payload["denied"]:
        with contextlib.suppress(PermissionError):
            Path(path).read_bytes()
            raise RuntimeError("read a denied file")
    return mean_length(client, payload)


@register("adv_read_corpus")
class ReadCorpus(Adversary):
    """Server code and a client function read the corpus the split was cut from and the
    raw source caches (``denied``), and, for contrast, files they may read (``allowed``)."""

    configs = {"tiny": {"denied": [], "allowed": []}}
    client_fn = staticmethod(read_denied)

    def payload(self, ctx):
        return {"denied": self.config["denied"], "allowed": self.config["allowed"]}

    def attack(self, ctx):
        outcomes = []
        for path in self.config["denied"] + self.config["allowed"]:
            if _attempt(outcomes, path, lambda p=path: Path(p).read_bytes()) is not None:
                outcomes.append(f"{path}: read")
        return outcomes


def daemonise(tag):
    """Start a process that leaves its session and its parent (setsid, double fork), named
    by ``tag`` in its command line; returns once it runs."""
    import sys

    ready_r, ready_w = os.pipe()  # close-on-exec: EOF once the daemon has exec'd
    first = os.fork()
    if first == 0:
        os.setsid()
        if os.fork() == 0:
            os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(300)", tag])
        os._exit(0)
    os.close(ready_w)
    os.read(ready_r, 1)
    os.close(ready_r)
    os.waitpid(first, 0)


def leave_daemon(client, payload):
    """Client side: leave a daemon behind (to serve a later run what it holds)."""
    daemonise(payload["tag"])
    if payload["fail"]:
        raise RuntimeError("the run fails after the daemon started")
    return mean_length(client, payload)


@register("adv_daemon")
class Daemon(Adversary):
    """The client function and the server side each leave a daemon behind; the server side
    then waits ``linger`` seconds (a run still going when the operator kills it)."""

    configs = {"tiny": {"tag": "", "fail": False, "linger": 0}}
    client_fn = staticmethod(leave_daemon)

    def payload(self, ctx):
        return {"tag": self.config["tag"], "fail": self.config["fail"]}

    def round(self, ctx, state, r):
        import time

        daemonise(self.config["tag"])  # the server side's, before the clients run
        state = super().round(ctx, state, r)
        time.sleep(self.config.get("linger", 0))
        return state


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
