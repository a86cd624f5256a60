"""Aggregation over seeds, the "gap closed" headline metric of paper 000, and paired
bootstrap intervals over test clients and seeds for differences between table rows."""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats


@dataclass(frozen=True)
class Summary:
    """Mean, sample std and two-sided t-interval over seeds; undefined parts are None (n=1)."""

    n: int
    mean: float
    std: float | None
    ci_low: float | None
    ci_high: float | None
    confidence: float

    def as_dict(self) -> dict[str, float | int | None]:
        return asdict(self)


def summarize(values: Sequence[float], confidence: float = 0.95) -> Summary:
    """Mean, std (ddof=1) and a Student-t confidence interval of per-seed values."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0 or not np.all(np.isfinite(x)):
        raise ValueError(f"need at least one finite value per seed, got {list(values)}")
    mean = float(x.mean())
    if x.size == 1:
        return Summary(1, mean, None, None, None, confidence)
    std = float(x.std(ddof=1))
    half = float(stats.t.ppf((1 + confidence) / 2, df=x.size - 1)) * std / math.sqrt(x.size)
    return Summary(int(x.size), mean, std, mean - half, mean + half, confidence)


def gap_closed(score: float, score_eps0: float, score_epsinf: float) -> float:
    """(score - score at eps=0) / (score at eps=inf - score at eps=0).

    0 means no better than the fully private (public-only) anchor, 1 means as good as
    non-private training; the sign convention works for lower-is-better scores (e.g. CE) too.
    """
    span = score_epsinf - score_eps0
    if span == 0:
        raise ValueError("the eps=0 and eps=inf anchors are equal; gap closed is undefined")
    return (score - score_eps0) / span


# --- Paired bootstrap over test clients and seeds -------------------------------------------
#
# A table's published cell is the mean over seeds of the micro-averaged test top-1 (hits
# summed over the test clients / tokens summed over them). Its uncertainty has two sampled
# sources: the seeds (the method's own randomness) and the test clients (a finite sample of
# people). Every arm of a table is scored on the same test clients, so a comparison between
# two arms resamples one client multiset for both (paired): what is shared between them (a
# client who is easy for every model) cancels in the difference, as it does in the point
# estimate. Seeds are independent runs, so each arm's seed error is drawn on its own.
#
# The seeds are not resampled: with the 3 a ranked cell has, a bootstrap over them covers the
# seed part like a t-interval at ±1.6 SE, about 75 % where it claims 95 % (a review measured
# 0.76 where seeds dominate). Each replicate instead adds a draw of the arm's seed-mean error
# under the t-interval's own model, s/√n · t(n − 1), to its client-resampled mean over all
# its seeds. With one seed there is no s: it counts none, which is why a one-seed cell is
# never ranked.
#
# s is the seeds' main effect only. The spread of the per-seed values also holds the seed ×
# client interaction (a seed's release doing well on some clients and badly on others),
# which the client resampling of the mean over seeds already counts; counting it in s too
# made the intervals ~1.6x too wide where it dominates (a review measured 0.99 coverage for
# a preference cell of 400 tuples and 7 seeds). Its share of s² is estimated from the
# replicates themselves: the client-resampling variance of each seed's deviation from the
# seeds' mean, summed over seeds / (n − 1), is what finite clients add to s² (floored at 0).
# A cell whose clients are all alike gets exactly its t-interval over seeds, one whose seeds
# agree its client bootstrap.


@dataclass(frozen=True)
class ClientHits:
    """One arm's next-token hits per (seed, test client), clients in one fixed order.

    ``tokens`` is the number of predicted tokens per (seed, client): the same for every
    seed of a text release (same test texts, same tokenizer), kept per seed so a cell whose
    seeds disagree cannot pass unnoticed.
    """

    hits: np.ndarray  # (seeds, clients), integer counts
    tokens: np.ndarray  # (seeds, clients), integer counts

    def __post_init__(self) -> None:
        hits, tokens = np.asarray(self.hits), np.asarray(self.tokens)
        if hits.ndim != 2 or hits.shape != tokens.shape or hits.size == 0:
            raise ValueError(
                f"hits {hits.shape} and tokens {tokens.shape}: need equal (seeds, clients)"
            )
        if np.any(hits < 0) or np.any(hits > tokens) or np.any(tokens.sum(axis=1) <= 0):
            raise ValueError("need 0 <= hits <= tokens per client and tokens on every seed")

    @property
    def seeds(self) -> int:
        return int(np.asarray(self.hits).shape[0])

    @property
    def clients(self) -> int:
        return int(np.asarray(self.hits).shape[1])

    def per_seed(self) -> np.ndarray:
        """Each seed's micro-averaged top-1: the numbers a record publishes."""
        hits, tokens = np.asarray(self.hits, float), np.asarray(self.tokens, float)
        return hits.sum(axis=1) / tokens.sum(axis=1)

    def point(self) -> float:
        """The published cell: the mean over seeds of :meth:`per_seed`."""
        return float(self.per_seed().mean())


@dataclass(frozen=True)
class Interval:
    """A point estimate (no resampling), its bootstrap percentile interval, and the SE a
    normal interval of the same width has (the seed errors' t with 2 degrees of freedom has
    no finite variance, so the replicates' own std is no SE)."""

    point: float
    low: float
    high: float
    se: float
    confidence: float

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


class PairedBootstrap:
    """Bootstrap replicates of arms scored on one set of ``clients`` test clients.

    One multiset of clients is drawn per replicate and shared by every arm asked for
    (``paired=True``); each arm's seed errors are drawn from a stream fixed by its
    ``name``, so its replicates do not depend on which other arms were asked for first.
    ``paired=False`` draws each arm's clients independently: what a comparison counts if
    it ignores that both arms saw the same people (reported beside the paired figure).
    """

    def __init__(self, clients: int, replicates: int = 2000, seed: int = 0) -> None:
        if clients < 1 or replicates < 2:
            raise ValueError("need at least one client and two replicates")
        self.clients, self.replicates, self.seed = clients, replicates, seed
        self._weights = self._draw_weights(np.random.default_rng([seed, 0]))
        self._cache: dict[tuple[str, bool], np.ndarray] = {}

    def _draw_weights(self, rng: np.random.Generator) -> np.ndarray:
        """How often each client is drawn in each replicate: (replicates, clients)."""
        n = self.clients
        return rng.multinomial(n, np.full(n, 1.0 / n), size=self.replicates).astype(np.float64)

    def replicates_of(self, name: str, arm: ClientHits, paired: bool = True) -> np.ndarray:
        """The arm's value in each replicate: its micro-averaged top-1 on the drawn clients,
        averaged over its seeds, plus a draw of its seed mean's error (see above)."""
        if arm.clients != self.clients:
            raise ValueError(
                f"arm {name!r} has {arm.clients} clients, the bootstrap {self.clients}"
            )
        key = (name, paired)
        if key not in self._cache:
            stream = zlib.crc32(name.encode())
            rng = np.random.default_rng([self.seed, 1 + int(not paired), stream])
            weights = self._weights if paired else self._draw_weights(rng)
            hits = weights @ np.asarray(arm.hits, float).T  # (replicates, seeds)
            tokens = weights @ np.asarray(arm.tokens, float).T
            top1 = np.divide(hits, tokens, out=np.zeros_like(hits), where=tokens > 0)
            self._cache[key] = top1.mean(axis=1) + self._seed_errors(arm, top1, rng)
        return self._cache[key]

    def _seed_errors(
        self, arm: ClientHits, resampled: np.ndarray, rng: np.random.Generator
    ) -> np.ndarray:
        """s/√n · t(n − 1) per replicate, s² the variance of the arm's per-seed values less
        the part the client resampling of ``resampled`` (replicates × seeds) already counts
        (see above); zero for one seed."""
        n = arm.seeds
        if n < 2:
            return np.zeros(self.replicates)
        deviations = resampled - resampled.mean(axis=1, keepdims=True)
        from_clients = float(deviations.var(axis=0, ddof=1).sum()) / (n - 1)
        main = max(float(arm.per_seed().var(ddof=1)) - from_clients, 0.0)
        return math.sqrt(main / n) * rng.standard_t(n - 1, size=self.replicates)

    def interval(self, point: float, replicates: np.ndarray, confidence: float = 0.95) -> Interval:
        tail = 100 * (1 - confidence) / 2
        finite = replicates[np.isfinite(replicates)]
        low, high = np.percentile(finite, [tail, 100 - tail])
        se = float(high - low) / (2 * float(stats.norm.ppf((1 + confidence) / 2)))
        return Interval(point, float(low), float(high), se, confidence)

    def difference(
        self,
        a: tuple[str, ClientHits],
        b: tuple[str, ClientHits],
        paired: bool = True,
        confidence: float = 0.95,
    ) -> Interval:
        """``a − b`` (e.g. method − public_only)."""
        (name_a, arm_a), (name_b, arm_b) = a, b
        reps = self.replicates_of(name_a, arm_a, paired) - self.replicates_of(name_b, arm_b, paired)
        return self.interval(arm_a.point() - arm_b.point(), reps, confidence)

    def gap_closed(
        self,
        arm: tuple[str, ClientHits],
        low: tuple[str, ClientHits],
        high: tuple[str, ClientHits],
        confidence: float = 0.95,
    ) -> Interval:
        """(arm − low) / (high − low) per replicate (paired): the share of the bounds' gap
        the arm closes (low: public_only, high: nonprivate)."""
        (_, a), (_, lo), (_, hi) = arm, low, high
        reps_a, reps_lo, reps_hi = (self.replicates_of(n, h) for n, h in (arm, low, high))
        with np.errstate(divide="ignore", invalid="ignore"):
            reps = (reps_a - reps_lo) / (reps_hi - reps_lo)
        return self.interval(gap_closed(a.point(), lo.point(), hi.point()), reps, confidence)


def seed_difference(
    a: Sequence[float], b: Sequence[float], confidence: float = 0.95
) -> Interval | None:
    """``mean(a) − mean(b)`` with a Welch t-interval over seeds only: the fallback for entries
    without per-client hits (it omits test sampling, and says so where it is shown). None when
    an arm has one seed (its variance cannot be estimated) or neither varies."""
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if x.size < 2 or y.size < 2:
        return None
    point = float(x.mean() - y.mean())
    va = x.var(ddof=1) / x.size if np.ptp(x) > 0 else 0.0
    vb = y.var(ddof=1) / y.size if np.ptp(y) > 0 else 0.0
    parts = [(v, n) for v, n in ((va, x.size), (vb, y.size)) if v > 0]
    if not parts:
        return None
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / sum(v**2 / (n - 1) for v, n in parts)  # Welch–Satterthwaite
    half = float(stats.t.ppf((1 + confidence) / 2, df=df)) * se
    return Interval(point, point - half, point + half, se, confidence)
