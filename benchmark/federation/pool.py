"""The client pool: the privacy boundary between a method's server code and private data.

Server code hands the pool a client-side function and a broadcast payload. The pool
samples the clients (full participation or Poisson), runs the function on each sampled
client's own data, clips every client's vector to the declared bound, noises, records the
release in the privacy ledger, and returns only the noised value. It never returns texts,
per-client values, or the sampled count (which is private under Poisson sampling).

What a release computes and records is its mechanism's (one module each,
:mod:`benchmark.federation.mechanisms`); the pool keeps what they share: sampling, the
client executor (:mod:`benchmark.federation.client_calls`), the independence check, the
release log and the ledger writes.

Clipping each row bounds one client's influence only if each row comes from one client,
so the pool checks that, on a sample, in a clean process (see :class:`ClientPool`).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import math
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict
from typing import Any, Protocol

import numpy as np

from benchmark.data import CLIENT_ID
from benchmark.federation import mechanisms
from benchmark.federation.client_calls import ClientCall, ClientExecutor, InProcessClients, Job
from benchmark.federation.costs import CostCounters
from benchmark.federation.independence_check import IndependenceCheck
from benchmark.federation.mechanisms.entries import CLIENT_SAMPLE
from benchmark.federation.plain import plain_number
from benchmark.federation.release_log import Delivery, ReleaseLog, call_of
from benchmark.federation.tree import TreeAggregator
from benchmark.privacy.errors import PrivacyError
from benchmark.privacy.ledger import PrivacyLedger, Release
from benchmark.protocol.jobs import BATCH, CLIENT, snapshot
from benchmark.protocol.operations import OPERATIONS, Aggregate, ServerAccessError

__all__ = ["Aggregate", "ClientPool", "ServerAccessError", "clipped_row_sum", "plain_number"]

INDEPENDENCE_CHECKS = 8  # clients recomputed alone per private release (see ClientPool)
# Streams of the secret seed (0-4: sampling, noise, cohorts, tree nodes, DP-SGD; 7: encode).
CLIENT_STREAM, BATCH_STREAM = 5, 6


class LocalTrainer(Protocol):
    """The harness's client-side trainer for ``pool.local_dp_finetune``."""

    def finetune(
        self, weights: dict[str, Any], records: list[dict[str, Any]], config: Any, seed: int
    ) -> dict[str, Any]: ...


def silos(units: list[list[dict[str, Any]]]) -> list[list[int]]:
    """The sample units of each client, in client-id order (a client_sample run's units
    hold one record each, and the record names its client)."""
    by_client: dict[str, list[int]] = {}
    for index, records in enumerate(units):
        by_client.setdefault(str(records[0][CLIENT_ID]), []).append(index)
    return [by_client[c] for c in sorted(by_client)]


def clipped_row_sum(
    rows: np.ndarray, clip_norm: float, out: np.ndarray | None = None
) -> np.ndarray:
    """Sum of the rows, each scaled to L2 norm at most ``clip_norm``, in float64 whatever
    float type the client side chose: in float16 or float32 one client could move the sum
    by more than ``clip_norm`` (one ulp of a large sum) or overflow it to ``inf`` (a bit
    that no noise hides). ``einsum`` casts as it goes, so a large block is not copied
    whole. One pass for the norms (which also catches non-finite values) and one for the
    sum, written into ``out`` (float64, the rows' length) when given: the pool reuses one
    per release, as a fresh 100 MB array a client costs more in page faults than the sum.
    The mechanism's clipping, for every release of the pool (and for measurements
    that must clip as it does, e.g. ``measurements/popri_standardisation.py``); the
    mechanisms bound ``clip_norm`` (:data:`benchmark.federation.mechanisms.entries.MAX_BOUND`),
    so the sum stays finite."""
    norms = np.sqrt(np.einsum("ij,ij->i", rows, rows, dtype=np.float64))
    if not np.all(np.isfinite(norms)):
        raise PrivacyError("a client-side function returned a non-finite value")
    scale = np.ones_like(norms)
    if math.isfinite(clip_norm):
        scale = np.minimum(1.0, clip_norm / np.maximum(norms, 1e-12))
    return np.einsum("i,ij->j", scale, rows, dtype=np.float64, out=out)


class ClientPool:
    """Private clients behind the privacy boundary (one privacy unit per client).

    Every numeric argument of the public methods is checked to be a plain number
    (:func:`plain_number`), and the pool's state can be loaded only into a fresh pool, once
    (:meth:`load_state_dict`), so the release counter, hence the noise, never repeats.

    **Independence check.** Each client-side call runs with Python's, numpy's and torch's
    global RNGs seeded from (secret seed, release, client) — once per call for batched
    functions — and the caller's RNG states restored after. For every private release
    (``aggregate`` with noise, each ``tree_step``, the ``encode`` of ``dp_sgd``),
    ``independence_checks`` = s of the sampled clients (all of them when fewer) are drawn
    from OS entropy (not from the pool's seed, which server code in this process could
    read to predict them) and recomputed alone, each in a process holding only that client
    (:mod:`benchmark.federation.independence_check`); the release is refused, before noise and
    before the ledger records it, if any row differs (float32 tolerance).

    Detection probability: if a fraction f of a release's n rows would differ when
    recomputed alone, s uniformly drawn clients all miss with probability
    C((1−f)n, s)/C(n, s) ≤ (1−f)^s ≤ e^(−f·s). A batched function that mixes every row
    (f = 1) is caught with probability 1 for s ≥ 1; a function that corrupts one row among
    n is caught with probability s/n per release, 1 − (1 − s/n)^R over R releases; a
    release with at most s participants is recomputed whole, so any differing row is
    caught. With s = 8, a function corrupting a quarter of the rows is caught with
    probability ≥ 1 − 0.75^8 ≈ 0.90 per release. A batched function's randomness must not
    depend on who else is in the batch (a batch of one is seeded like the full batch).
    Non-private releases are not checked (their ε is already infinite).
    ``independence_checks=0`` turns the check off; the runner never does.

    ``simulated`` (a ``guarantee: simulated`` run) allows the one uncharged release a
    paper's own accounting needs (:meth:`part_sizes`); the ledger records it as such.

    **Budget first.** Every release is admitted by the ledger (the run's budget) before
    any client-side code runs for it: a release that would exceed the budget is refused
    having computed nothing.

    **Release log.** With a ``release_log`` (the runner gives one to every private run),
    every call that delivers a value or changes the pool's state is logged, value included,
    before it returns, and a resumed run replays the logged calls instead of recomputing
    them (:mod:`benchmark.federation.release_log`). The runner opens the log
    (:meth:`open_release_log`) before the method makes any call.
    """

    def __init__(
        self,
        clients: dict[str, list[dict[str, Any]]],
        *,
        ledger: PrivacyLedger,
        seed: int,
        unit: str = "user",
        allow_nonprivate: bool = False,
        independence_checks: int = INDEPENDENCE_CHECKS,
        executor: ClientExecutor | None = None,
        local_trainer: LocalTrainer | None = None,
        simulated: bool = False,
        preference_policy: Callable[[], Any] | None = None,
        release_log: ReleaseLog | None = None,
    ) -> None:
        self._ids = sorted(clients)
        self._records = [list(clients[cid]) for cid in self._ids]
        self._executor = executor if executor is not None else InProcessClients(self._records)
        self._ledger = ledger
        self._seed = seed
        self._unit = unit
        self._allow_nonprivate = allow_nonprivate
        self._checks = plain_number("independence_checks", independence_checks, integer=True)
        if self._checks < 0:
            raise PrivacyError(f"independence_checks must be >= 0, got {self._checks}")
        self._release_index = 0
        self._restored = False
        self._trees: dict[str, TreeAggregator] = {}
        self.costs = CostCounters()
        # client_sample runs: each client's sample units, in client-id order; named groups
        # of client positions; the harness's local DP-SGD trainer.
        self._silos = silos(self._records) if unit == CLIENT_SAMPLE else []
        self._groups: dict[str, list[int]] = {}
        self._local_trainer = local_trainer
        # paper 003: each partition's part count and every unit's part (-1: none)
        self._partitions: dict[str, tuple[int, np.ndarray]] = {}
        self._simulated = simulated
        self._policy = preference_policy  # the profile's preference policy, for DP-FT
        # the release log: deliveries made (the next one's position), logged ones to replay
        self._log = release_log
        self._log_open = False
        self._sequence = 0
        self._replays: list[Delivery] = []
        self._sealed = ""  # why the pool takes no more calls (benchmark.shared_rounds)

    def __getattr__(self, name: str) -> Any:
        raise ServerAccessError(
            f"the client pool has no {name!r}: server-side code only receives clipped, "
            "noised aggregates (use pool.aggregate or pool.open_tree)"
        )

    @property
    def num_clients(self) -> int:
        """Privacy units; in a ``client_sample`` run, clients (each holding many units)."""
        return len(self._silos) if self._unit == CLIENT_SAMPLE else len(self._records)

    def _unit_level(self, what: str) -> None:
        """Refuse a unit-level mechanism in a client_sample run (it would neither noise per
        client nor name the client groups the ledger accounts for)."""
        if self._unit == CLIENT_SAMPLE:
            raise PrivacyError(
                f"{what} is not available with privacy.unit client_sample: use "
                "pool.local_gaussian or pool.local_dp_finetune on named client groups"
            )

    @property
    def ledger(self) -> PrivacyLedger:
        return self._ledger

    def _rng(self, *stream: int) -> np.random.Generator:
        return np.random.default_rng([self._seed, self._release_index, *stream])

    def _call_seed(self, *key: int) -> int:
        """Seed of one client-side call: 64 bits of a BLAKE2b hash of the secret seed and
        ``key``. Client code can read its seed (``torch.initial_seed()``); a cryptographic
        hash keeps it from giving away the secret seed, which also draws the noise."""
        digest = hashlib.blake2b(repr((self._seed, *key)).encode(), digest_size=8).digest()
        return int.from_bytes(digest, "little")

    def _choose(self, population: list[int]) -> frozenset[int]:
        """The units one release checks: ``independence_checks`` of ``population`` (all of
        them when fewer), drawn from OS entropy."""
        count = min(self._checks, len(population))
        return frozenset(secrets.SystemRandom().sample(population, count))

    def _recheck(
        self,
        kind: str,
        job: Job,
        chosen: frozenset[int],
        bound: float = math.inf,
        exact: bool = False,
        order: int = 2,
    ) -> IndependenceCheck:
        """The independence check of one release over the ``chosen`` units; a row may differ
        by a share of its norm or of the release's finite ``bound`` (its clip norm; an L1
        bound with ``order`` 1), whichever is larger, else of 1, and not at all with
        ``exact`` (:func:`~benchmark.federation.independence_check.rows_match`)."""
        floor = bound if math.isfinite(bound) else 1.0
        blob = b"" if not chosen else job if isinstance(job, bytes) else snapshot(*job)
        return IndependenceCheck(kind, blob, chosen, floor, exact, order)

    # -- the release log ------------------------------------------------------------------

    def open_release_log(self) -> int:
        """Charge the deliveries logged since the checkpoint to the ledger and queue them
        for replay; returns how many. The runner calls it once, after restoring the
        checkpoint (or on a fresh start), before the method makes any call: the charge
        holds whether or not the method asks for them again."""
        if self._log is None:
            return 0
        if self._log_open:
            raise PrivacyError("the release log is opened once, before any call")
        self._log_open = True
        self._replays = self._log.pending(self._sequence)
        for delivery in self._replays:
            self._ledger.releases.extend(PrivacyLedger.from_json(delivery.releases).releases)
        return len(self._replays)

    def replays_pending(self) -> int:
        """Logged deliveries the resumed method has not asked for again yet (the runner
        refuses to checkpoint or finish while any is left: the next release index would be
        one that was already delivered)."""
        return len(self._replays)

    def prune_release_log(self) -> None:
        """Forget the logged deliveries a checkpoint now holds (the runner, after saving)."""
        if self._log is not None:
            self._log.prune(self._sequence)

    def seal(self, reason: str) -> None:
        """Refuse every later call, saying ``reason`` (the runner, for a run that
        post-processes another run's rounds: its seed and release counter are that run's,
        so a call would draw noise that run may have drawn already)."""
        self._sealed = reason

    def _delivered(
        self,
        op: str,
        args: dict[str, Any],
        compute: Callable[[], Any],
        release: Release | None = None,
    ) -> Any:
        """The value of one call (every operation's, before any client code runs):
        replayed from the release log if this call was delivered before the run was
        interrupted, else computed (``release`` admitted by the budget first) and logged
        before it is returned."""
        if self._sealed:
            raise PrivacyError(f"pool.{op}: the client pool takes no calls: {self._sealed}")
        call = ""
        if self._log is not None:
            if not self._log_open:
                raise PrivacyError("the release log must be opened before the first call")
            call = call_of(op, args)
            if self._replays:
                return self._replay(call)
        if release is not None:
            self._ledger.admit(release)
        first = len(self._ledger.releases)
        value = compute()
        if self._log is not None:
            added = PrivacyLedger(self._ledger.releases[first:]).to_json()
            self._log.write(self._sequence, call, value, added, self._replay_state())
        self._sequence += 1
        return value

    def _replay(self, call: str) -> Any:
        """The next logged delivery's value, if ``call`` is the call it answered (the same
        operation and public arguments). Its client-side job is not compared: whatever the
        resumed method sends there, nothing is computed and it gets only the value it was
        given before, so no job can learn more; and a job's pickle is not the same bytes in
        another process (torch keys storages by address, a tokenizer's vocabulary is a hash
        map), so comparing it refused every resumed run of an honest model-training method.
        Another operation or other arguments are refused: the method is not the run that
        was interrupted. Both are read as JSON, not compared as text: a log written before
        this rule also holds the job's digest."""
        logged = self._replays[0]
        asked, was = json.loads(call), json.loads(logged.call)
        if (asked["op"], asked["args"]) != (was["op"], was["args"]):
            raise PrivacyError(
                f"call {logged.sequence} of this run was delivered before it was interrupted "
                f"(pool.{was['op']}, label {was['args'].get('label')!r}); the resumed run "
                f"asked pool.{asked['op']} (label {asked['args'].get('label')!r}) with other "
                "arguments: a resumed run must repeat its delivered calls in order, so the "
                "run is refused"
            )
        self._replays.pop(0)
        value, state = self._log.replay(logged.sequence)  # type: ignore[union-attr]
        self._load_replay_state(state)
        self._sequence += 1
        return value

    def _replay_state(self) -> dict[str, Any]:
        """What a call may change in the pool besides the clients' memos (a cache): the
        state a replayed call leaves the pool in."""
        return {
            "release_index": self._release_index,
            "trees": {k: t.state_dict() for k, t in self._trees.items()},
            "groups": self._groups,
            "partitions": {k: (n, a.tolist()) for k, (n, a) in self._partitions.items()},
            "costs": asdict(self.costs),
        }

    def _load_replay_state(self, state: dict[str, Any]) -> None:
        self._release_index = plain_number("release_index", state["release_index"], integer=True)
        self._trees = {k: TreeAggregator.from_state(v) for k, v in state["trees"].items()}
        self._groups = {k: [int(c) for c in v] for k, v in state.get("groups", {}).items()}
        self._partitions = {
            k: (int(n), np.array(a, dtype=np.int64))
            for k, (n, a) in state.get("partitions", {}).items()
        }
        costs = state["costs"]
        self.costs = costs if isinstance(costs, CostCounters) else CostCounters(**costs)

    def _sample(self, sample_rate: float) -> list[int]:
        """The units one release samples (``sample_rate`` checked by the caller)."""
        if sample_rate == 1:
            return list(range(self.num_clients))
        keep = self._rng(0).random(self.num_clients) < sample_rate
        return [int(i) for i in np.flatnonzero(keep)]

    @staticmethod
    def _validated(rows: Any, count: int, dim: int) -> np.ndarray:
        """Client output as a (count, dim) finite float array, or a PrivacyError."""
        if rows is None:
            raise PrivacyError("the client side sent fewer rows than clients")
        rows = np.asarray(rows)
        if rows.dtype.kind not in "fiu":  # what was sent is not described: client code chose it
            raise PrivacyError(
                "client-side functions must return numbers: raw data never leaves a client"
            )
        if rows.dtype.kind != "f":
            rows = rows.astype(np.float64)
        if rows.ndim != 2 or rows.shape[0] != count:
            raise PrivacyError("client-side function must give one 1-D vector per client")
        if rows.shape[1] != dim:
            raise PrivacyError(f"client vectors must have the declared dim {dim}")
        return rows

    @classmethod
    def _row_blocks(
        cls, outputs: Iterator[Any], count: int, dim: int
    ) -> Iterator[tuple[int, np.ndarray]]:
        """One call's ``count`` rows as (offset, validated block) pairs: an executor may
        stream a large batched call's rows in consecutive blocks (so the coordinator holds
        one block, not hundreds of MB); a per-client call is one block of one row."""
        offset = 0
        while offset < count:
            block = next(outputs, None)
            block = None if block is None else np.asarray(block)
            partial = block is not None and block.ndim == 2 and 0 < len(block) < count - offset
            rows = cls._validated(block, len(block) if partial else count - offset, dim)
            yield offset, rows
            offset += len(rows)

    def _clipped_sum(
        self, call: ClientCall, clip_norm: float, check: IndependenceCheck
    ) -> tuple[np.ndarray, float]:
        """Sum of the clipped client vectors, and the seconds the clients took (see
        :meth:`_client_rows`). Only one client's vector (e.g. a full model delta) is held
        at once, besides the rows kept for ``check``."""
        total, block_sum = np.zeros(call.dim), np.empty(call.dim)

        def add(rows: np.ndarray) -> None:
            np.add(total, clipped_row_sum(rows, clip_norm, out=block_sum), out=total)

        seconds = self._client_rows(call, check, add)
        return total, seconds

    def _client_rows(
        self, call: ClientCall, check: IndependenceCheck, consume: Callable[[np.ndarray], None]
    ) -> float:
        """Run the client calls and hand each call's validated rows to ``consume``; return
        the seconds the clients took. The executor yields one client's row at a time
        unless ``call.batched`` (one call over all its units). Each row is submitted to
        ``check`` (which keeps at most ``independence_checks`` of them; the caller finishes
        it). Calls are seeded from ``call.key``. Costs are counted for the ``expected``
        (public) number of participants; client seconds exclude the check."""
        indices, dim = call.indices, call.dim
        if call.batched:
            seeds = [self._call_seed(*call.key, BATCH_STREAM)] * len(indices)
            groups = [indices] if indices else []
        else:
            seeds = [self._call_seed(*call.key, CLIENT_STREAM, i) for i in indices]
            groups = [[i] for i in indices]
        seed_of = dict(zip(indices, seeds, strict=True))
        start = time.perf_counter()
        sent = seeds[:1] if call.batched else seeds
        outputs = iter(self._executor.rows(call.job, indices, sent, call.batched))
        for group in groups:
            for offset, rows in self._row_blocks(outputs, len(group), dim):
                for position, i in enumerate(group[offset : offset + len(rows)]):
                    kept = rows[position : position + 1] if call.batched else rows[position]
                    check.submit(i, self._records[i], seed_of[i], {"row": kept})
                consume(rows)
        if next(outputs, None) is not None:
            raise PrivacyError("the client side sent more rows than clients")
        seconds = time.perf_counter() - start
        floats_down, texts_down = self._executor.payload_counts
        self.costs.add(call.expected, floats_down, texts_down, dim, seconds)
        return seconds

    def _checked_rows(
        self,
        job: Job,
        dim: int,
        batched: bool,
        checked: bool,
        exact: bool = False,
        bound: float = math.inf,
        order: int = 2,
    ) -> np.ndarray:
        """Every unit's row (num_clients, dim), in unit order, independence-checked when
        ``checked`` (recomputed rows equal with ``exact``: a partition's part indices; else
        within a share of the larger of a row's norm and the release's finite ``bound``, in
        L2, or in L1 with ``order`` 1):
        for the mechanisms that need the rows themselves, not their sum (a Laplace sum's L1
        clipping, DP-PCA's covariance, DP-SGD's per-row gradients, a partition). They stay
        in this process."""
        indices = list(range(self.num_clients))
        chosen = self._choose(indices if checked else [])
        kind = BATCH if batched else CLIENT
        check = self._recheck(kind, job, chosen, bound, exact, order)
        parts: list[np.ndarray] = []
        call = ClientCall(job, indices, dim, batched, len(indices), (self._release_index,))
        seconds = self._client_rows(call, check, parts.append)
        rows = np.concatenate(parts) if parts else np.zeros((0, dim))
        if not np.all(np.isfinite(rows)):
            raise PrivacyError("a client-side function returned a non-finite value")
        check.finish(seconds)
        return rows.astype(np.float64)

    def _checked_sum(self, call: ClientCall, clip_norm: float, checked: bool) -> np.ndarray:
        """:meth:`_clipped_sum` with its own independence check (when ``checked``)."""
        kind = BATCH if call.batched else CLIENT
        chosen = self._choose(call.indices if checked else [])
        check = self._recheck(kind, call.job, chosen, clip_norm)
        total, seconds = self._clipped_sum(call, clip_norm, check)
        check.finish(seconds)
        return total

    def _record(self, release: Release) -> None:
        """Record ``release`` (admitted before it was computed) and move to the next
        release index."""
        self._ledger.record(release)
        self._release_index += 1

    def state_dict(self) -> dict[str, Any]:
        """Harness-private state for resuming (kept in the run directory, never published)."""
        return {
            "release_index": self._release_index,
            "sequence": self._sequence,
            "memos": self._executor.memos(),
            "trees": {k: t.state_dict() for k, t in self._trees.items()},
            "groups": self._groups,
            "partitions": {k: (n, a.tolist()) for k, (n, a) in self._partitions.items()},
            "costs": self.costs,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a checkpointed pool (the runner, at resume): only into a fresh pool, once.

        Loading into a pool that has released anything, or loading twice, could rewind the
        release counter: the next release would draw the same noise as an earlier one and
        the difference of the two would cancel it."""
        if self._release_index or self._restored or self._sequence or self._log_open:
            raise PrivacyError(
                "pool state can only be loaded into a fresh pool, once (when a run resumes): "
                "rewinding the release counter would draw the same noise twice"
            )
        self._restored = True
        self._load_replay_state(state)
        self._sequence = plain_number("sequence", state.get("sequence", 0), integer=True)
        self._executor.load_memos(state["memos"])


def _bind_operations() -> None:
    """The pool's operations, as declared (:mod:`benchmark.protocol.operations`): each
    its mechanism module's function of the same name."""
    for operation in OPERATIONS:
        module = importlib.import_module(f"{mechanisms.__name__}.{operation.mechanism}")
        setattr(ClientPool, operation.name, getattr(module, operation.name))


_bind_operations()
