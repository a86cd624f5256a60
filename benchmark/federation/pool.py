"""The client pool: the privacy boundary between a method's server code and private data.

Server code hands the pool a client-side function and a broadcast payload. The pool
samples the clients (full participation or Poisson), runs the function on each sampled
client's own data, clips every client's vector to the declared L2 bound, sums, adds
Gaussian noise of the declared multiplier, records the release in the privacy ledger, and
returns only the noisy sum. It never returns texts, per-client values, or the sampled
count (which is private under Poisson sampling).

Clipping each row bounds one client's influence only if each row comes from one client,
so the pool checks that, on a sample, in a clean process (see :class:`ClientPool`).
"""

from __future__ import annotations

import hashlib
import json
import math
import secrets
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import numpy as np

from benchmark.data import CLIENT_ID, STRONG
from benchmark.federation.clients import ClientBatch, ClientData, client_scope, seeded_rngs
from benchmark.federation.costs import CostCounters, count_payload
from benchmark.federation.recompute import BATCH, CLIENT, ENCODE, Recheck, output_rows, snapshot
from benchmark.federation.release_log import Delivery, ReleaseLog, call_of, digest, tensors_digest
from benchmark.federation.tree import TreeAggregator
from benchmark.privacy.errors import PrivacyError
from benchmark.privacy.ledger import (
    EXPONENTIAL,
    LAPLACE,
    NONPRIVATE,
    SUBSAMPLED_GAUSSIAN,
    TREE_AGGREGATION,
    UNCHARGED,
    PrivacyLedger,
    Release,
)

ClientFn = Callable[[ClientData, Any], np.ndarray]
BatchFn = Callable[[ClientBatch, Any], np.ndarray]
# A client-side job: the function and its payload, live (run in this process) or as the
# snapshot an isolated method process sent (recompute.snapshot: run by a client worker, never
# unpickled here).
Job = tuple[Any, Any] | bytes


def job_of(client_fn: Any, payload: Any) -> Job:
    """The job of one release: an isolated method's pickled blob (its payload travels
    inside it), or the live function and payload."""
    return client_fn if isinstance(client_fn, bytes) else (client_fn, payload)


def job_digest(job: Job) -> str:
    """The digest the release log tells calls apart by: of the blob, or of the live
    function and payload as a blob (:func:`~benchmark.federation.recompute.snapshot`)."""
    return digest(job if isinstance(job, bytes) else snapshot(*job))


class ClientExecutor(Protocol):
    """Where client-side code runs: this process (:class:`InProcessClients`) or a client
    worker (:class:`benchmark.isolation.client_process.ClientProcess`). ``rows`` yields one
    (1, dim) array per client, or a batched call's (n, dim) rows as one array or as
    consecutive blocks of them, and then sets ``payload_counts`` (floats and texts a client
    downloads)."""

    payload_counts: tuple[int, int]

    def rows(
        self, job: Any, indices: list[int], seeds: list[int], batched: bool
    ) -> Iterable[np.ndarray]: ...

    def run_all(self, train_fn: Any) -> Any: ...

    def local_clients(self) -> list[ClientData]: ...

    def memos(self) -> Any: ...

    def load_memos(self, state: Any) -> None: ...


class InProcessClients:
    """Client-side functions run in the pool's own process (unit tests, in-process runs)."""

    def __init__(self, records: list[list[dict[str, Any]]]) -> None:
        self._clients = [ClientData(r, {}) for r in records]
        self.payload_counts = (0, 0)

    def rows(
        self, job: Any, indices: list[int], seeds: list[int], batched: bool
    ) -> Iterator[np.ndarray]:
        fn, payload = job
        self.payload_counts = count_payload(payload)
        if batched:
            if indices:
                with client_scope(), seeded_rngs(seeds[0]):
                    rows = fn(ClientBatch([self._clients[i] for i in indices]), payload)
                yield rows
            return
        for i, seed in zip(indices, seeds, strict=True):
            with client_scope(), seeded_rngs(seed):
                row = np.asarray(fn(self._clients[i], payload))
            yield row[None]

    def run_all(self, train_fn: Any) -> Any:
        with client_scope():
            return train_fn(self._clients)

    def local_clients(self) -> list[ClientData]:
        return self._clients

    def memos(self) -> list[dict[str, Any]]:
        return [c._memo for c in self._clients]

    def load_memos(self, state: list[dict[str, Any]]) -> None:
        for client, memo in zip(self._clients, state, strict=True):
            client._memo.clear()
            client._memo.update(memo)


INDEPENDENCE_CHECKS = 8  # clients recomputed alone per private release (see ClientPool)
# Streams of the secret seed (0-4: sampling, noise, cohorts, tree nodes, DP-SGD).
CLIENT_STREAM, BATCH_STREAM, ENCODE_STREAM = 5, 6, 7

_NUMPY_INTEGERS = frozenset(
    {np.byte, np.ubyte, np.short, np.ushort, np.intc, np.uintc, np.int_, np.uint}
    | {np.longlong, np.ulonglong}
)
_NUMPY_FLOATS = frozenset({np.half, np.single, np.double, np.longdouble})


def plain_number(name: str, value: object, *, integer: bool = False) -> int | float:
    """``value`` as a builtin ``int`` (or ``float``), or a :class:`PrivacyError` naming it.

    The exact type is checked, not ``isinstance``: a subclass of ``float`` can override
    ``__mul__`` or ``__float__`` and record σ = 4.3 while the noise it scales is zero. Only
    ``int``, ``float`` and numpy's own scalar types pass (``bool`` does not), and the
    conversion uses their own arithmetic.
    """
    kind = type(value)
    if kind is int or kind in _NUMPY_INTEGERS:
        return int(value)  # type: ignore[call-overload]
    if not integer and (kind is float or kind in _NUMPY_FLOATS):
        return float(value)  # type: ignore[arg-type]
    wanted = "an int" if integer else "an int or a float"
    raise PrivacyError(f"{name} must be {wanted} (a plain number), got {kind.__name__}")


def plain_flag(name: str, value: object) -> bool:
    """``value`` if it is exactly a ``bool``: an object whose truth changes between reads
    could run one path in the pool and another in the check."""
    if type(value) is not bool:
        raise PrivacyError(f"{name} must be True or False, got {type(value).__name__}")
    return value


CLIENT_SAMPLE = "client_sample"


class LocalTrainer(Protocol):
    """The harness's client-side trainer for :meth:`ClientPool.local_dp_finetune`."""

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


def clipped_row_sum(rows: np.ndarray, clip_norm: float) -> np.ndarray:
    """Sum of the rows, each scaled to L2 norm at most ``clip_norm``: one pass for the norms
    (which also catches non-finite values) and one matrix-vector product. The mechanism's
    clipping, for every release of the pool (and for measurements that must clip as it
    does, e.g. ``measurements/popri_standardisation.py``)."""
    norms = np.linalg.norm(rows, axis=1)
    if not np.all(np.isfinite(norms)):
        raise PrivacyError("a client-side function returned a non-finite value")
    scale = np.ones_like(norms)
    if math.isfinite(clip_norm):
        scale = np.minimum(1.0, clip_norm / np.maximum(norms, 1e-12))
    return (scale.astype(rows.dtype) @ rows).astype(np.float64)


class ServerAccessError(PrivacyError, AttributeError):
    """Server code asked the pool for something it never exposes."""


@dataclass(frozen=True)
class Aggregate:
    """What the server receives: the noisy sum and the public normaliser ``q * N``."""

    noisy_sum: np.ndarray
    expected_count: float

    @property
    def mean(self) -> np.ndarray:
        return self.noisy_sum / max(self.expected_count, 1.0)


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
    (:mod:`benchmark.federation.recompute`); the release is refused, before noise and
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

    def _recheck(self, kind: str, job: Job, chosen: frozenset[int]) -> Recheck:
        """The independence check of one release over the ``chosen`` units."""
        if not chosen:
            return Recheck(kind, b"", chosen)
        return Recheck(kind, job if isinstance(job, bytes) else snapshot(*job), chosen)

    def _check_mechanism(self, clip_norm: float, noise_multiplier: float) -> bool:
        """Validate the declared mechanism; True when it is a non-private release."""
        if noise_multiplier < 0 or math.isnan(noise_multiplier):
            raise PrivacyError(f"noise_multiplier must be >= 0, got {noise_multiplier}")
        if noise_multiplier == 0:
            return self._exact_allowed("a release without noise (noise_multiplier=0)")
        if not (math.isfinite(clip_norm) and clip_norm > 0):
            raise PrivacyError(f"a private release needs a finite clip_norm > 0, got {clip_norm}")
        return False

    def _exact_allowed(self, what: str) -> bool:
        """True if this run may make ``what`` (a non-private release), else a PrivacyError."""
        if not self._allow_nonprivate:
            raise PrivacyError(
                f"{what} is only allowed in a non-private run (privacy.epsilon: inf)"
            )
        return True

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

    def _delivered(
        self,
        op: str,
        args: dict[str, Any],
        job: Callable[[], str],
        compute: Callable[[], Any],
        release: Release | None = None,
    ) -> Any:
        """The value of one call: replayed from the release log if this call was
        delivered before the run was interrupted, else computed (``release`` admitted by
        the budget first) and logged before it is returned. ``job`` gives the digest of the
        call's client-side code (only computed when there is a log)."""
        call = ""
        if self._log is not None:
            if not self._log_open:
                raise PrivacyError("the release log must be opened before the first call")
            call = call_of(op, args, job())
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
        """The next logged delivery's value, if ``call`` is the call it answered; a
        different call is refused: it must not get that value, and its noise would be the
        logged release's (the same release index)."""
        logged = self._replays[0]
        if logged.call != call:
            asked, was = json.loads(call), json.loads(logged.call)
            raise PrivacyError(
                f"call {logged.sequence} of this run was delivered before it was interrupted "
                f"(pool.{was['op']}, label {was['args'].get('label')!r}); the resumed run "
                f"asked pool.{asked['op']} (label {asked['args'].get('label')!r}) with other "
                "arguments or client code: a resumed run must repeat its delivered calls in "
                "order, so the run is refused"
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
        self,
        indices: list[int],
        job: Job,
        clip_norm: float,
        dim: int,
        batched: bool,
        expected: float,
        call_key: tuple[int, ...],
        check: Recheck,
    ) -> tuple[np.ndarray, float]:
        """Sum of the clipped client vectors, and the seconds the clients took (see
        :meth:`_client_rows`). Only one client's vector (e.g. a full model delta) is held
        at once, besides the rows kept for ``check``."""
        total = np.zeros(dim)

        def add(rows: np.ndarray) -> None:
            nonlocal total
            total += clipped_row_sum(rows, clip_norm)

        seconds = self._client_rows(indices, job, dim, batched, expected, call_key, check, add)
        return total, seconds

    def _client_rows(
        self,
        indices: list[int],
        job: Job,
        dim: int,
        batched: bool,
        expected: float,
        call_key: tuple[int, ...],
        check: Recheck,
        consume: Callable[[np.ndarray], None],
    ) -> float:
        """Run the client calls and hand each call's validated rows to ``consume``; return
        the seconds the clients took. The executor yields one client's row at a time
        unless ``batched`` (one call over all ``indices``). Each row is submitted to
        ``check`` (which keeps at most ``independence_checks`` of them; the caller finishes
        it). Calls are seeded from ``call_key``. Costs are counted for the ``expected``
        (public) number of participants; client seconds exclude the check."""
        if batched:
            seeds = [self._call_seed(*call_key, BATCH_STREAM)] * len(indices)
            groups = [indices] if indices else []
        else:
            seeds = [self._call_seed(*call_key, CLIENT_STREAM, i) for i in indices]
            groups = [[i] for i in indices]
        seed_of = dict(zip(indices, seeds, strict=True))
        start = time.perf_counter()
        outputs = iter(self._executor.rows(job, indices, seeds[:1] if batched else seeds, batched))
        for group in groups:
            for offset, rows in self._row_blocks(outputs, len(group), dim):
                for position, i in enumerate(group[offset : offset + len(rows)]):
                    kept = rows[position : position + 1] if batched else rows[position]
                    check.submit(i, self._records[i], seed_of[i], {"row": kept})
                consume(rows)
        if next(outputs, None) is not None:
            raise PrivacyError("the client side sent more rows than clients")
        seconds = time.perf_counter() - start
        floats_down, texts_down = self._executor.payload_counts
        self.costs.add(expected, floats_down, texts_down, dim, seconds)
        return seconds

    def _checked_rows(self, job: Job, dim: int, batched: bool, checked: bool) -> np.ndarray:
        """Every unit's row (num_clients, dim), in unit order, independence-checked when
        ``checked``: for the mechanisms that need the rows themselves, not their sum
        (a Laplace sum's L1 clipping, DP-PCA's covariance, DP-SGD's per-row gradients,
        a partition). They stay in this process."""
        indices = list(range(self.num_clients))
        kind = BATCH if batched else CLIENT
        check = self._recheck(kind, job, self._choose(indices if checked else []))
        parts: list[np.ndarray] = []
        key = (self._release_index,)
        seconds = self._client_rows(
            indices, job, dim, batched, len(indices), key, check, parts.append
        )
        check.finish(seconds)
        rows = np.concatenate(parts) if parts else np.zeros((0, dim))
        if not np.all(np.isfinite(rows)):
            raise PrivacyError("a client-side function returned a non-finite value")
        return rows.astype(np.float64)

    def _checked_sum(
        self,
        indices: list[int],
        job: Job,
        clip_norm: float,
        dim: int,
        batched: bool,
        expected: float,
        call_key: tuple[int, ...],
        checked: bool,
    ) -> np.ndarray:
        """:meth:`_clipped_sum` with its own independence check (when ``checked``)."""
        job_kind = BATCH if batched else CLIENT
        check = self._recheck(job_kind, job, self._choose(indices if checked else []))
        total, seconds = self._clipped_sum(
            indices, job, clip_norm, dim, batched, expected, call_key, check
        )
        check.finish(seconds)
        return total

    def aggregate(
        self,
        client_fn: ClientFn | BatchFn,
        payload: Any = None,
        *,
        dim: int,
        clip_norm: float,
        noise_multiplier: float,
        sample_rate: float = 1.0,
        label: str,
        batched: bool = False,
    ) -> Aggregate:
        """Run ``client_fn`` on the sampled clients; return the clipped, noised sum.

        Noise std is ``noise_multiplier * clip_norm`` per coordinate. With ``batched``,
        ``client_fn`` takes a :class:`ClientBatch` and returns one row per client.
        """
        dim = plain_number("dim", dim, integer=True)
        clip_norm = plain_number("clip_norm", clip_norm)
        noise_multiplier = plain_number("noise_multiplier", noise_multiplier)
        sample_rate = plain_number("sample_rate", sample_rate)
        batched = plain_flag("batched", batched)
        self._unit_level("pool.aggregate")
        nonprivate = self._check_mechanism(clip_norm, noise_multiplier)
        if not 0 < sample_rate <= 1:
            raise PrivacyError(f"sample_rate must be in (0, 1], got {sample_rate}")
        release = self._gaussian(
            nonprivate,
            noise_multiplier,
            clip_norm,
            sample_rate,
            1,
            label,
            dim,
            sensitivity=clip_norm,
        )
        job = job_of(client_fn, payload)
        expected = sample_rate * self.num_clients

        def compute() -> tuple[np.ndarray, float]:
            total = self._checked_sum(
                self._sample(sample_rate),
                job,
                clip_norm,
                dim,
                batched,
                expected,
                call_key=(self._release_index,),
                checked=not nonprivate,
            )
            if not nonprivate:
                total = total + self._rng(1).normal(0.0, noise_multiplier * clip_norm, size=dim)
            self._record(release)
            return total, expected

        args = {"dim": dim, "clip_norm": clip_norm, "noise_multiplier": noise_multiplier}
        args |= {"sample_rate": sample_rate, "label": label, "batched": batched}
        total, expected = self._delivered(
            "aggregate", args, lambda: job_digest(job), compute, release
        )
        return Aggregate(total, expected)

    def centralized(self, train_fn: Callable[[list[ClientData]], Any], *, label: str) -> Any:
        """Run ``train_fn`` on every client's data at once (the ε = ∞ bound only).

        Records a non-private release, so the ledger's ε is infinite; refused in any
        private run.
        """
        if not self._allow_nonprivate:
            raise PrivacyError(
                "centralized access to client data is only allowed in a non-private run "
                "(privacy.epsilon: inf)"
            )
        result = self._executor.run_all(train_fn)
        self._record(Release(NONPRIVATE, 0.0, math.inf, 1.0, 1, label, unit=self._unit))
        return result

    def dp_sgd(
        self,
        model: Any,
        encode: Callable[[list[dict[str, Any]]], Any],
        loss_fn: Callable[[Any, Any], Any],
        *,
        noise_multiplier: float,
        clip_norm: float,
        batch_size: int,
        steps: int,
        lr: float,
        label: str,
    ) -> Any:
        """Sample-level / central DP: DP-SGD over the units, one example per unit.

        See :func:`benchmark.federation.dp_sgd.run_dp_sgd`; ``encode`` runs client side, on
        all examples at once, so its rows are checked for independence like a batched
        function's. The per-example gradients need no such check: opacus computes and clips
        them from the model and ``loss_fn`` per example (a ``loss_fn`` that mixes the
        examples of a batch is outside what recomputation can see).
        """
        from benchmark.federation.dp_sgd import run_dp_sgd

        noise_multiplier = plain_number("noise_multiplier", noise_multiplier)
        clip_norm = plain_number("clip_norm", clip_norm)
        batch_size = plain_number("batch_size", batch_size, integer=True)
        steps = plain_number("steps", steps, integer=True)
        lr = plain_number("lr", lr)
        self._unit_level("pool.dp_sgd")
        if self._check_mechanism(clip_norm, noise_multiplier):
            raise PrivacyError("DP-SGD needs noise_multiplier > 0")
        if any(len(records) != 1 for records in self._records):
            raise PrivacyError(
                "DP-SGD clips per example, so every privacy unit must hold one example "
                "(privacy.unit: sample or central); for user-level DP use pool.aggregate"
            )
        if batch_size < 1 or steps < 1:
            raise PrivacyError("DP-SGD needs batch_size >= 1 and steps >= 1")
        # opacus samples each example at 1 / (batches per epoch), known before training
        sample_rate = 1.0 / math.ceil(len(self._records) / batch_size)
        release = Release(
            SUBSAMPLED_GAUSSIAN,
            noise_multiplier,
            clip_norm,
            sample_rate,
            steps,
            label,
            sampling="poisson",
            unit=self._unit,
        )

        def compute() -> dict[str, Any]:
            with client_scope():
                examples = [c.records[0] for c in self._executor.local_clients()]
                trained, used_rate = run_dp_sgd(
                    model,
                    examples,
                    self._checked_encode(encode),
                    loss_fn,
                    noise_multiplier=noise_multiplier,
                    clip_norm=clip_norm,
                    batch_size=batch_size,
                    steps=steps,
                    lr=lr,
                    seed=int(self._rng(4).integers(2**31)),
                )
            if not math.isclose(used_rate, sample_rate, rel_tol=1e-12):
                raise PrivacyError(f"DP-SGD sampled at {used_rate}, admitted at {sample_rate}")
            self._record(release)
            return {k: v.detach().cpu().clone() for k, v in trained.state_dict().items()}

        args = {"noise_multiplier": noise_multiplier, "clip_norm": clip_norm, "lr": lr}
        args |= {"batch_size": batch_size, "steps": steps, "label": label}

        def job() -> str:
            code = snapshot((encode, loss_fn), None)
            return digest(code, tensors_digest(model.state_dict()).encode())

        weights = self._delivered("dp_sgd", args, job, compute, release)
        model.load_state_dict(weights)
        return model

    def _checked_encode(self, encode: Callable[[list[dict[str, Any]]], Any]) -> Any:
        """``encode`` seeded, with its per-example rows checked before DP-SGD uses them."""
        seed = self._call_seed(self._release_index, ENCODE_STREAM)

        def checked(examples: list[dict[str, Any]]) -> Any:
            chosen = self._choose(list(range(len(self._records))))
            check = self._recheck(ENCODE, (encode, None), chosen)
            start = time.perf_counter()
            with seeded_rngs(seed):
                tensors = encode(examples)
            rows = output_rows(ENCODE, tensors)
            for i in sorted(check.chosen):
                one = {name: array[i : i + 1] for name, array in rows.items()}
                check.submit(i, self._records[i], seed, one)
            check.finish(time.perf_counter() - start)
            return tensors

        return checked

    def open_tree(
        self,
        name: str,
        *,
        dim: int,
        clip_norm: float,
        noise_multiplier: float,
        cohort_size: int,
        max_leaves: int | None = None,
    ) -> int:
        """Start a single-epoch tree (DP-FTRL): clients are shuffled once and split into
        disjoint cohorts of ``cohort_size``, so each client contributes to one leaf only.
        The whole tree (``max_leaves`` caps it) is recorded in the ledger now; returns
        its number of leaves."""
        dim = plain_number("dim", dim, integer=True)
        clip_norm = plain_number("clip_norm", clip_norm)
        noise_multiplier = plain_number("noise_multiplier", noise_multiplier)
        cohort_size = plain_number("cohort_size", cohort_size, integer=True)
        if max_leaves is not None:
            max_leaves = plain_number("max_leaves", max_leaves, integer=True)
        self._unit_level("pool.open_tree")
        if self._check_mechanism(clip_norm, noise_multiplier):
            raise PrivacyError("tree aggregation is a private mechanism; use aggregate() instead")
        if not 1 <= cohort_size <= self.num_clients:
            raise PrivacyError(f"cohort_size must be in [1, {self.num_clients}], got {cohort_size}")
        leaves = self.num_clients // cohort_size
        if max_leaves is not None:  # a shorter tree (fewer rounds) has fewer levels
            leaves = max(1, min(leaves, max_leaves))
        release = Release(
            mechanism=TREE_AGGREGATION,
            noise_multiplier=noise_multiplier,
            sensitivity=clip_norm,
            sample_rate=1.0,
            count=leaves,
            label=name,
            unit=self._unit,
            dim=dim,
        )

        def compute() -> int:
            order = self._rng(2).permutation(self.num_clients)
            cohorts = [
                order[i * cohort_size : (i + 1) * cohort_size].tolist() for i in range(leaves)
            ]
            self._trees[name] = TreeAggregator(
                dim=dim,
                clip_norm=clip_norm,
                noise_multiplier=noise_multiplier,
                cohorts=cohorts,
                seed=[self._seed, self._release_index, 3],
            )
            self._record(release)
            return leaves

        args = {"name": name, "dim": dim, "clip_norm": clip_norm}
        args |= {"noise_multiplier": noise_multiplier, "cohort_size": cohort_size}
        args |= {"max_leaves": max_leaves}
        return int(self._delivered("open_tree", args, str, compute, release))

    def tree_step(
        self, name: str, client_fn: ClientFn | BatchFn, payload: Any = None, batched: bool = False
    ) -> np.ndarray:
        """Add the next cohort's clipped sum as a leaf; return the noisy prefix sum so far."""
        batched = plain_flag("batched", batched)
        if name not in self._trees:
            raise PrivacyError(f"no open tree named {name!r}")
        job = job_of(client_fn, payload)

        def compute() -> np.ndarray:
            tree = self._trees[name]
            cohort = tree.next_cohort()
            leaf = self._checked_sum(
                cohort,
                job,
                tree.clip_norm,
                tree.dim,
                batched,
                len(cohort),
                call_key=(*tree.seed[1:], tree.step),
                checked=True,
            )
            return tree.add_leaf(leaf)

        args = {"name": name, "batched": batched}
        return self._delivered("tree_step", args, lambda: job_digest(job), compute)

    # -- paper 003: pure-ε releases, DP-PCA, partitions and per-part DP-SGD ---------------

    def laplace_aggregate(
        self,
        client_fn: ClientFn | BatchFn,
        payload: Any = None,
        *,
        dim: int,
        l1_bound: float,
        epsilon: float,
        label: str,
        batched: bool = False,
    ) -> np.ndarray:
        """Every unit's vector clipped to L1 norm ``l1_bound``, summed, plus Laplace noise
        of scale ``l1_bound``/ε per coordinate: ε-DP (pure) under add/remove of a unit.
        ``epsilon=inf`` is the exact sum, in a non-private run only."""
        l1_bound = plain_number("l1_bound", l1_bound)
        dim, epsilon = plain_number("dim", dim, integer=True), plain_number("epsilon", epsilon)
        batched = plain_flag("batched", batched)
        self._unit_level("pool.laplace_aggregate")
        nonprivate = self._check_pure(epsilon, l1_bound)
        release = self._pure(nonprivate, LAPLACE, epsilon, l1_bound, label, dim)
        job = job_of(client_fn, payload)

        def compute() -> np.ndarray:
            rows = self._checked_rows(job, dim, batched, not nonprivate)
            norms = np.abs(rows).sum(axis=1)
            total = np.minimum(1.0, l1_bound / np.maximum(norms, 1e-12)) @ rows
            if not nonprivate:
                total = total + self._rng(1).laplace(0.0, l1_bound / epsilon, size=dim)
            self._record(release)
            return total

        args = {"dim": dim, "l1_bound": l1_bound, "epsilon": epsilon}
        args |= {"label": label, "batched": batched}
        return self._delivered("laplace_aggregate", args, lambda: job_digest(job), compute, release)

    def dp_pca(
        self,
        client_fn: ClientFn | BatchFn,
        payload: Any = None,
        *,
        dim: int,
        components: int,
        epsilon: float,
        label: str,
        batched: bool = False,
    ) -> np.ndarray:
        """A (dim, components) orthonormal basis of the units' vectors' top principal
        directions: the vectors are clipped to L2 norm 1 and the components drawn by the
        exponential mechanism (:mod:`benchmark.federation.dp_pca`), ε-DP (pure).
        Uncentred: a caller that wants centring releases a mean first and subtracts it
        client side. ``epsilon=inf`` gives the exact top eigenvectors (non-private runs)."""
        from benchmark.federation.dp_pca import top_eigenvectors

        components = plain_number("components", components, integer=True)
        dim, epsilon = plain_number("dim", dim, integer=True), plain_number("epsilon", epsilon)
        if not 1 <= components <= dim:
            raise PrivacyError(f"components must be in [1, dim={dim}], got {components}")
        batched = plain_flag("batched", batched)
        self._unit_level("pool.dp_pca")
        nonprivate = self._check_pure(epsilon, 1.0)
        release = self._pure(nonprivate, EXPONENTIAL, epsilon, 1.0, label, dim)
        job = job_of(client_fn, payload)

        def compute() -> np.ndarray:
            rows = self._checked_rows(job, dim, batched, not nonprivate)
            norms = np.linalg.norm(rows, axis=1)
            rows *= np.minimum(1.0, 1.0 / np.maximum(norms, 1e-12))[:, None]
            basis = top_eigenvectors(rows.T @ rows, components, epsilon, self._rng(1))
            self._record(release)
            return basis

        args = {"dim": dim, "components": components, "epsilon": epsilon}
        args |= {"label": label, "batched": batched}
        return self._delivered("dp_pca", args, lambda: job_digest(job), compute, release)

    def define_partition(
        self,
        name: str,
        client_fn: ClientFn | BatchFn,
        payload: Any = None,
        *,
        parts: int,
        batched: bool = False,
    ) -> None:
        """Each unit computes, client side, which of ``parts`` parts it is in (its row: one
        number; anything else puts it in no part). The pool keeps the assignment and
        never returns it; releases on a part (:meth:`part_sizes`, :meth:`dp_logistic_sgd`)
        use only that part's units, so releases on different parts compose in parallel.
        A partition is fixed once defined, and the rows are independence-checked: a unit's
        part must depend on its own data only, or adding it could move others."""
        parts = plain_number("parts", parts, integer=True)
        self._unit_level("pool.define_partition")
        if type(name) is not str or not name or name in self._partitions:
            raise PrivacyError(f"a partition needs a new, non-empty name, got {name!r}")
        if parts < 1:
            raise PrivacyError(f"parts must be >= 1, got {parts}")
        batched = plain_flag("batched", batched)
        job = job_of(client_fn, payload)

        def compute() -> None:
            rows = self._checked_rows(job, 1, batched, not self._allow_nonprivate)
            values = rows[:, 0]
            valid = (values == np.round(values)) & (values >= 0) & (values < parts)
            self._partitions[name] = (parts, np.where(valid, values, -1).astype(np.int64))
            self._release_index += 1

        args = {"name": name, "parts": parts, "batched": batched}
        self._delivered("define_partition", args, lambda: job_digest(job), compute)

    def _part(self, partition: str, part: int) -> np.ndarray:
        """The members of one part (a boolean mask over units)."""
        if type(partition) is not str or partition not in self._partitions:
            raise PrivacyError(f"no partition named {partition!r}; define it first")
        parts, assignment = self._partitions[partition]
        if not 0 <= part < parts:
            raise PrivacyError(f"partition {partition!r} has parts 0..{parts - 1}, got {part}")
        return assignment == part

    def part_sizes(self, partition: str, *, epsilon: float, label: str) -> np.ndarray:
        """The number of units in each part, with Laplace noise of scale 1/ε (a unit moves
        one count by one): ε-DP. ``epsilon=inf`` releases the exact counts: recorded as a
        non-private release in a non-private run; in a ``guarantee: simulated`` run it is
        allowed uncharged (paper 003's own accounting, which never privatised its cluster
        histogram) and recorded as such; refused in any formal private run."""
        epsilon = plain_number("epsilon", epsilon)
        self._unit_level("pool.part_sizes")
        if type(partition) is not str or partition not in self._partitions:
            raise PrivacyError(f"no partition named {partition!r}; define it first")
        parts, assignment = self._partitions[partition]
        uncharged = math.isinf(epsilon) and self._simulated and not self._allow_nonprivate
        if uncharged:
            nonprivate = False
            release = Release(UNCHARGED, 0.0, 1.0, 1.0, 1, label, unit=self._unit, dim=parts)
        else:
            nonprivate = self._check_pure(epsilon, 1.0)
            release = self._pure(nonprivate, LAPLACE, epsilon, 1.0, label, parts)

        def compute() -> np.ndarray:
            counts = np.bincount(assignment[assignment >= 0], minlength=parts).astype(np.float64)
            if not (nonprivate or uncharged):
                counts = counts + self._rng(1).laplace(0.0, 1.0 / epsilon, size=parts)
            self._record(release)
            return counts

        args = {"partition": partition, "epsilon": epsilon, "label": label}
        return self._delivered("part_sizes", args, str, compute, release)

    def dp_logistic_sgd(
        self,
        client_fn: ClientFn | BatchFn,
        payload: Any = None,
        *,
        dim: int,
        init: list[float],
        noise_multiplier: float,
        clip_norm: float,
        sample_rate: float,
        steps: int,
        lr: float,
        expected_batch: float,
        label: str,
        partition: str | None = None,
        part: int | None = None,
        batched: bool = False,
    ) -> np.ndarray:
        """DP-SGD of a linear Bradley–Terry model θ on the units' feature rows (one per
        unit, computed client side once), run here
        (:func:`benchmark.federation.linear_dp_sgd.logistic_dp_sgd`); returns θ. With a
        ``partition``, only ``part``'s members contribute (the others' rows are zeroed
        here) and the release is recorded on that part. Poisson sampling at
        ``sample_rate`` over ``steps`` steps; ``noise_multiplier`` 0 only in a
        non-private run."""
        from benchmark.federation.linear_dp_sgd import logistic_dp_sgd

        dim = plain_number("dim", dim, integer=True)
        theta = np.array([plain_number("init", v) for v in init], dtype=np.float64)
        noise_multiplier = plain_number("noise_multiplier", noise_multiplier)
        clip_norm = plain_number("clip_norm", clip_norm)
        sample_rate = plain_number("sample_rate", sample_rate)
        steps = plain_number("steps", steps, integer=True)
        lr = plain_number("lr", lr)
        expected_batch = plain_number("expected_batch", expected_batch)
        self._unit_level("pool.dp_logistic_sgd")
        if theta.shape != (dim,) or not np.all(np.isfinite(theta)):
            raise PrivacyError(f"init must be {dim} finite numbers")
        if steps < 1 or not (math.isfinite(lr) and math.isfinite(expected_batch)):
            raise PrivacyError("steps must be >= 1, lr and expected_batch finite")
        if expected_batch <= 0 or not 0 < sample_rate <= 1:
            raise PrivacyError("expected_batch must be > 0 and sample_rate in (0, 1]")
        nonprivate = self._check_mechanism(clip_norm, noise_multiplier)
        if nonprivate and not math.isfinite(clip_norm):
            raise PrivacyError("DP-SGD needs a finite clip_norm")
        members = None
        if partition is not None or part is not None:
            members = self._part(partition, plain_number("part", part, integer=True))
        batched = plain_flag("batched", batched)
        release = self._gaussian(
            nonprivate,
            noise_multiplier,
            clip_norm,
            sample_rate,
            steps,
            label,
            dim,
            partition=partition or "",
            part=-1 if members is None else int(part),  # type: ignore[arg-type]
        )
        job = job_of(client_fn, payload)

        def compute() -> np.ndarray:
            rows = self._checked_rows(job, dim, batched, not nonprivate)
            if members is not None:
                rows[~members] = 0.0
            trained = logistic_dp_sgd(
                rows,
                theta,
                noise_multiplier=noise_multiplier,
                clip_norm=clip_norm,
                sample_rate=sample_rate,
                steps=steps,
                lr=lr,
                expected_batch=expected_batch,
                rng=self._rng(1),
            )
            self._record(release)
            return trained

        args = {"dim": dim, "init": theta.tolist(), "noise_multiplier": noise_multiplier}
        args |= {"clip_norm": clip_norm, "sample_rate": sample_rate, "steps": steps, "lr": lr}
        args |= {"expected_batch": expected_batch, "label": label, "batched": batched}
        args |= {"partition": release.partition, "part": release.part}
        return self._delivered("dp_logistic_sgd", args, lambda: job_digest(job), compute, release)

    def _check_pure(self, epsilon: float, sensitivity: float) -> bool:
        """Validate a pure-ε mechanism's budget; True for an exact (non-private) release."""
        if math.isnan(epsilon) or epsilon <= 0:
            raise PrivacyError(f"epsilon must be > 0, got {epsilon}")
        if math.isinf(epsilon):
            return self._exact_allowed("an exact release (epsilon=inf)")
        if not (math.isfinite(sensitivity) and sensitivity > 0):
            raise PrivacyError(f"a private release needs a finite bound > 0, got {sensitivity}")
        return False

    def _pure(
        self,
        nonprivate: bool,
        mechanism: str,
        epsilon: float,
        sensitivity: float,
        label: str,
        dim: int,
    ) -> Release:
        """The ledger entry of one pure-ε release, or of a non-private one."""
        return Release(
            mechanism=NONPRIVATE if nonprivate else mechanism,
            noise_multiplier=0.0 if nonprivate or mechanism != LAPLACE else 1.0 / epsilon,
            sensitivity=math.inf if nonprivate else sensitivity,
            sample_rate=1.0,
            count=1,
            label=label,
            unit=self._unit,
            dim=dim,
            epsilon=0.0 if nonprivate else epsilon,
        )

    # -- client_sample runs (paper 001): sample-level DP per client, client groups --------

    def define_group(self, name: str, clients: list[int]) -> None:
        """Name a group of clients (positions in ``range(num_clients)``) that releases can
        address. Groups are disjoint and fixed once defined: each is accounted separately
        (:func:`benchmark.privacy.accountants.group_epsilons`), so a client in two groups
        would pay twice without the ledger knowing."""
        if self._unit != CLIENT_SAMPLE:
            raise PrivacyError("client groups exist only with privacy.unit client_sample")
        if type(name) is not str or not name or name in self._groups:
            raise PrivacyError(f"a group needs a new, non-empty name, got {name!r}")
        members = [plain_number("client", c, integer=True) for c in clients]
        taken = {c for group in self._groups.values() for c in group}
        if not members or len(set(members)) != len(members):
            raise PrivacyError(f"group {name!r} needs distinct clients")
        if any(not 0 <= c < len(self._silos) or c in taken for c in members):
            raise PrivacyError(
                f"group {name!r}: clients must be unused positions < {len(self._silos)}"
            )

        def compute() -> None:
            self._groups[name] = sorted(members)

        self._delivered("define_group", {"name": name, "clients": members}, str, compute)

    def strong_clients(self) -> list[int]:
        """Positions of the clients the split flags ``strong`` (built with
        ``strong_fraction``): paper 001's clients able to fine-tune. Capability is a public,
        per-client fact the server schedules by, not private data, so reading it costs no
        privacy. Empty when the split flags none."""
        if self._unit != CLIENT_SAMPLE:
            raise PrivacyError("strong clients exist only with privacy.unit client_sample")
        return [
            position
            for position, units in enumerate(self._silos)
            if self._records[units[0]][0].get(STRONG) is True
        ]

    def _members(self, groups: list[str]) -> tuple[tuple[str, ...], list[int]]:
        names = tuple(groups)
        if not names or any(type(g) is not str or g not in self._groups for g in names):
            raise PrivacyError(f"unknown client groups {list(names)}; define them first")
        if len(set(names)) != len(names):
            raise PrivacyError(f"client groups named twice: {list(names)}")
        return names, sorted(c for g in names for c in self._groups[g])

    def local_gaussian(
        self,
        client_fn: BatchFn,
        payload: Any = None,
        *,
        dim: int,
        clip_norm: float,
        noise_multiplier: float,
        groups: list[str],
        label: str,
    ) -> Aggregate:
        """Each client of ``groups`` releases its own noisy vector; the server gets their sum.

        ``client_fn`` is batched over one client's samples (a :class:`ClientBatch` of
        one-record clients) and returns one row per sample. The pool clips every row to
        ``clip_norm`` (the L2 sensitivity of a client's vector to one of its samples under
        add/remove), sums a client's rows, adds that client's own Gaussian noise of std
        ``noise_multiplier * clip_norm``, and returns the sum over clients (paper 001's
        P̃ = Σ P̃_i and ṽ = Σ ṽ_i). Rows are checked for independence across the release's
        samples. One ledger entry, for the named groups; ``expected_count`` is the number
        of clients.
        """
        dim = plain_number("dim", dim, integer=True)
        clip_norm = plain_number("clip_norm", clip_norm)
        noise_multiplier = plain_number("noise_multiplier", noise_multiplier)
        names, members = self._members(groups)
        nonprivate = self._check_mechanism(clip_norm, noise_multiplier)
        release = self._gaussian(
            nonprivate, noise_multiplier, clip_norm, 1.0, 1, label, dim, groups=names
        )
        job = job_of(client_fn, payload)

        def compute() -> tuple[np.ndarray, float]:
            population = [u for c in members for u in self._silos[c]]
            check = self._recheck(BATCH, job, self._choose([] if nonprivate else population))
            total, seconds = np.zeros(dim), 0.0
            for c in members:
                units = self._silos[c]
                key = (self._release_index, c)
                rows, took = self._clipped_sum(units, job, clip_norm, dim, True, 1, key, check)
                total += rows
                seconds += took
                if not nonprivate:
                    total += self._rng(1, c).normal(0.0, noise_multiplier * clip_norm, size=dim)
            check.finish(seconds)
            self._record(release)
            return total, float(len(members))

        args = {"dim": dim, "clip_norm": clip_norm, "noise_multiplier": noise_multiplier}
        args |= {"groups": names, "label": label}
        total, expected = self._delivered(
            "local_gaussian", args, lambda: job_digest(job), compute, release
        )
        return Aggregate(total, expected)

    def local_dp_finetune(
        self,
        weights: dict[str, Any],
        *,
        prompt_template: str,
        groups: list[str],
        noise_multiplier: float,
        clip_norm: float,
        sample_rate: float,
        batch_size: float,
        steps: int,
        lr: float,
        max_length: int,
        label: str,
    ) -> dict[str, Any]:
        """One FedAvg round of local DP-SGD (paper 001 Alg. A.3) on the clients of ``groups``.

        Every client fine-tunes the profile's conditional LM, starting from ``weights`` (a
        state dict), on its own samples for ``steps`` DP-SGD steps: Poisson batches at
        ``sample_rate``, per-sample clipping to ``clip_norm``, Gaussian noise, SGD at
        ``lr`` over the public expected ``batch_size``, loss −log p(x | c) with
        c = ``prompt_template`` filled with the sample's label
        (:mod:`benchmark.federation.local_dp_sgd`). The whole training is harness
        code run in this (trusted) process: the method supplies tensors and numbers only.
        Returns the mean of the clients' model deltas (each already DP for its client's
        samples; the mean is post-processing). Records ``steps`` compositions of the
        subsampled Gaussian for the groups.
        """
        from benchmark.federation.local_dp_sgd import LocalDPSGD, plain_weights

        names, members = self._members(groups)
        weights = plain_weights(weights)  # checked once, before any client trains on them
        if type(prompt_template) is not str:
            raise PrivacyError("local DP-SGD needs the prompt template as a plain string")
        steps_config, nonprivate = self._dp_sgd_steps(
            noise_multiplier, clip_norm, sample_rate, batch_size, steps, lr
        )
        config = LocalDPSGD(
            **asdict(steps_config),
            prompt_template=prompt_template,
            max_length=plain_number("max_length", max_length, integer=True),
        )
        if self._local_trainer is None:
            raise PrivacyError("this pool has no local trainer (the runner gives it one)")
        trainer = self._local_trainer
        release = self._gaussian(
            nonprivate,
            config.noise_multiplier,
            config.clip_norm,
            config.sample_rate,
            config.steps,
            label,
            0,
            groups=names,
        )

        def compute() -> dict[str, Any]:
            start = time.perf_counter()
            total: dict[str, Any] = {}
            for c in members:  # a running sum: one client's delta in memory at a time
                delta = trainer.finetune(
                    weights,
                    [self._records[u][0] for u in self._silos[c]],
                    config,
                    seed=int(self._rng(4, c).integers(2**63)),
                )
                for name, tensor in delta.items():
                    total[name] = total[name] + tensor if name in total else tensor
            mean = {name: tensor / len(members) for name, tensor in total.items()}
            self.costs.add(
                len(members),
                sum(t.numel() for t in weights.values()),
                0,
                sum(t.numel() for t in mean.values()),
                time.perf_counter() - start,
            )
            self._record(release)
            return mean

        args = {**asdict(config), "groups": names, "label": label}
        return self._delivered(
            "local_dp_finetune",
            args,
            lambda: digest(tensors_digest(weights).encode(), prompt_template.encode()),
            compute,
            release,
        )

    def _dp_sgd_steps(
        self,
        noise_multiplier: float,
        clip_norm: float,
        sample_rate: float,
        batch_size: float,
        steps: int,
        lr: float,
    ) -> tuple[Any, bool]:
        """The checked numbers of a harness DP-SGD run, and whether it is non-private."""
        from benchmark.federation.local_dp_sgd import DPSGDSteps

        config = DPSGDSteps(
            noise_multiplier=plain_number("noise_multiplier", noise_multiplier),
            clip_norm=plain_number("clip_norm", clip_norm),
            sample_rate=plain_number("sample_rate", sample_rate),
            batch_size=plain_number("batch_size", batch_size),
            steps=plain_number("steps", steps, integer=True),
            lr=plain_number("lr", lr),
        )
        nonprivate = self._check_mechanism(config.clip_norm, config.noise_multiplier)
        if not 0 < config.sample_rate <= 1 or config.steps < 1 or config.batch_size <= 0:
            raise PrivacyError("DP-SGD needs sample_rate in (0, 1], batch_size > 0 and steps >= 1")
        return config, nonprivate

    def dp_preference_finetune(
        self,
        weights: dict[str, Any],
        *,
        stage: str,
        partition: str,
        part: int,
        noise_multiplier: float,
        clip_norm: float,
        sample_rate: float,
        batch_size: float,
        steps: int,
        lr: float,
        beta: float,
        max_completion_tokens: int,
        label: str,
    ) -> dict[str, Any]:
        """One stage of paper 003's DP-FT on the tuples of one part of ``partition``: the
        profile's preference policy loaded with ``weights`` (a state dict), trained here by DP-SGD
        (``stage`` ``sft`` or ``dpo``; per-tuple clipping, Gaussian noise, Adam on the
        noisy gradients: :mod:`benchmark.federation.preference_dp_sgd`); returns the new
        weights. The parts are disjoint, so the SFT and DPO halves compose in parallel."""
        from benchmark.federation.local_dp_sgd import plain_weights
        from benchmark.federation.preference_dp_sgd import STAGES, finetune_on_preferences
        from benchmark.preference_training import trainable_copy
        from benchmark.profiles.seeding import seeded

        self._unit_level("pool.dp_preference_finetune")
        weights = plain_weights(weights)
        if stage not in STAGES:
            raise PrivacyError(f"stage must be one of {STAGES}, got {stage!r}")
        members = self._part(partition, plain_number("part", part, integer=True))
        config, nonprivate = self._dp_sgd_steps(
            noise_multiplier, clip_norm, sample_rate, batch_size, steps, lr
        )
        beta = plain_number("beta", beta)
        max_completion_tokens = plain_number(
            "max_completion_tokens", max_completion_tokens, integer=True
        )
        if self._policy is None:
            raise PrivacyError("this pool has no preference policy (the runner gives it one)")
        policy = self._policy
        release = self._gaussian(
            nonprivate,
            config.noise_multiplier,
            config.clip_norm,
            config.sample_rate,
            config.steps,
            label,
            0,
            partition=partition,
            part=int(part),
        )

        def compute() -> dict[str, Any]:
            generator = policy()
            model = trainable_copy(generator.model)
            model.load_state_dict(weights, strict=True)
            records = [self._records[u][0] for u in np.flatnonzero(members)]
            start = time.perf_counter()
            rng = self._rng(4)
            with seeded(int(rng.integers(2**62))):  # dropout: from the secret seed too
                finetune_on_preferences(
                    model,
                    generator.tokenizer,
                    records,
                    stage=stage,
                    beta=beta,
                    max_completion_tokens=max_completion_tokens,
                    steps=config,
                    rng=rng,
                )
            trained = {k: v.detach().cpu() for k, v in model.state_dict().items()}
            size = sum(t.numel() for t in weights.values())
            self.costs.add(
                config.sample_rate * len(records), size, 0, size, time.perf_counter() - start
            )
            self._record(release)
            return trained

        args = {**asdict(config), "stage": stage, "partition": partition, "part": int(part)}
        args |= {"beta": beta, "max_completion_tokens": max_completion_tokens, "label": label}
        return self._delivered(
            "dp_preference_finetune",
            args,
            lambda: tensors_digest(weights),
            compute,
            release,
        )

    def _gaussian(
        self,
        nonprivate: bool,
        noise_multiplier: float,
        clip_norm: float,
        sample_rate: float,
        count: int,
        label: str,
        dim: int,
        *,
        groups: tuple[str, ...] = (),
        sensitivity: float | None = None,
        partition: str = "",
        part: int = -1,
    ) -> Release:
        """The ledger entry of ``count`` (subsampled) Gaussian releases, or of a
        non-private one. ``sensitivity`` defaults to ``clip_norm`` for private releases and
        ∞ for non-private ones (``aggregate`` records its clip norm either way, as it
        always has)."""
        if sensitivity is None:
            sensitivity = math.inf if nonprivate else clip_norm
        return Release(
            mechanism=NONPRIVATE if nonprivate else SUBSAMPLED_GAUSSIAN,
            noise_multiplier=noise_multiplier,
            sensitivity=sensitivity,
            sample_rate=sample_rate,
            count=count,
            label=label,
            sampling="full" if sample_rate == 1 else "poisson",
            unit=self._unit,
            dim=dim,
            groups=groups,
            partition=partition,
            part=part,
        )

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
