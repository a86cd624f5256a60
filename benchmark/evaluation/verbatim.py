"""Verbatim detection: how many released texts are copies of private texts, checked on
every text release before it is published.

A released text *matches* a private text (train, validation or test) when their normalised
forms are equal (Unicode NFKC, case-folded, punctuation and whitespace dropped: only the
``\\w+`` words count) or when they share a run of :data:`NGRAM` consecutive normalised words.
A text or n-gram that the public part also holds is not evidence: a method may read the
public part, so it can write that text without touching private data (chat has many generic
lines, and scripture many stock phrases).

Why n = 12 words: at n = 12 few public texts share an n-gram with a private text (the shares
per n: ``docs/measurements/working-scale.md#verbatim``). Twelve words is a quarter of a
span: a release that copies a private span, or half of one, still matches; one that only
shares a stock phrase does not (``docs/architecture.md``, "Verbatim detection").

The threshold is calibrated on each split, on the public part: the public texts are real
texts of the same population that no method copied from the private parts, so the share of
them that match (each checked with its own texts left out of the public filter) is the
natural rate of a release that does not leak. The calibration reads the held-out parts
only (:data:`CALIBRATION_PARTS`), never train: a count of public texts matching train
texts would be an exact, unnoised query on the train units, published in every record
whatever the release. The held-out rate is scaled to all private parts by their numbers
of texts (the part sizes, which the split's manifest publishes anyway): the parts are
people drawn at random, so a text that copied nothing meets each part's texts alike. A
release of ``n`` texts is over the threshold when ``k`` matches would be improbable
(one-sided binomial tail below :data:`ALPHA`) at the upper 95 % confidence bound of that
rate. Over the threshold, a
private run's release is refused publication; an ε = ∞ run (the non-private bound and the
oracle control, which releases real train texts by design) is not refused, but its counts
are recorded like every other run's, so they show where the threshold sits.

Cost: each text is hashed once (its normalised form and its n-gram shingles), so a check
is linear in the words of the split and the release (a timing:
``docs/measurements/working-scale.md#verbatim``).
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from benchmark.data import PRIVATE_PARTS, TEXT, FederatedSplit

NGRAM = 12  # words; chosen by measurement: docs/measurements/working-scale.md#verbatim
ALPHA = 1e-3  # level of the one-sided test that a release matches more than public text does
CONFIDENCE = 0.95  # of the upper bound on the public part's natural rate
# The natural rate assumed for a split without a public part or held-out texts (nothing
# to calibrate on): above every all-parts rate measured, below the scaled held-out bounds
# of the small kjv splits (docs/architecture.md, "Verbatim detection").
NO_PUBLIC_RATE = 0.01
CALIBRATION_PARTS = ("validation", "test")  # held out: the calibration never reads train
PAIR_FIELDS = ("prompt", "chosen", "rejected")  # a preference tuple's text fields

_WORD = re.compile(r"\w+")


def normalised_words(text: str) -> list[str]:
    """The words of ``text`` after NFKC and case folding; punctuation and spacing dropped."""
    return _WORD.findall(unicodedata.normalize("NFKC", text).casefold())


def text_keys(text: str, n: int = NGRAM) -> frozenset[int]:
    """Hashes of what a copy would share: the whole normalised text (tagged, so it never
    equals an n-gram's hash) and every run of ``n`` consecutive words; none for a text
    without words (an empty text copies nothing)."""
    words = normalised_words(text)
    if not words:
        return frozenset()
    whole = hash(("text", " ".join(words)))
    return frozenset([whole, *(hash(tuple(words[i : i + n])) for i in range(len(words) - n + 1))])


def record_texts(records: Iterable[dict[str, Any]]) -> list[str]:
    """The texts of ``records``: each one's text, and a preference tuple's prompt and
    replies (elsewhere a ``prompt`` is a conversation's topic, a label)."""
    out = []
    for record in records:
        tuple_ = all(isinstance(record.get(f), str) for f in PAIR_FIELDS)
        fields = (TEXT, *PAIR_FIELDS) if tuple_ else (TEXT,)
        out += [record[f] for f in fields if isinstance(record.get(f), str)]
    return out


def released_texts(artifact: Any) -> list[str]:
    """What a release publishes as text: its texts, and each pair's prompt and replies."""
    pairs = [t for pair in artifact.pairs for t in pair.values() if isinstance(t, str)]
    return [*artifact.texts, *pairs]


class KeyIndex:
    """For each key, how many indexed texts hold it."""

    def __init__(self, texts: Iterable[str], n: int = NGRAM) -> None:
        self.n = n
        self.counts: Counter[int] = Counter()
        self.texts = 0  # how many texts it indexes
        for text in texts:
            self.counts.update(text_keys(text, n))
            self.texts += 1


@dataclass(frozen=True)
class VerbatimIndex:
    """Each private part's keys and the public part's (which make a shared key no evidence)."""

    private: dict[str, KeyIndex]
    public: KeyIndex

    def parts_matched(
        self, keys: frozenset[int], public_own: int = 0, parts: Sequence[str] = PRIVATE_PARTS
    ) -> list[str]:
        """Which of ``parts`` ``keys`` share a key with, counting only keys held by more
        than ``public_own`` public texts as public (1 for a public text checked against
        the others, so its own texts do not hide it)."""
        public = self.public.counts
        evidence = [k for k in keys if public.get(k, 0) <= public_own]
        return [p for p in parts if not self.private[p].counts.keys().isdisjoint(evidence)]


def build_index(split: FederatedSplit, n: int = NGRAM) -> VerbatimIndex:
    private = {p: KeyIndex(record_texts(split.records(p)), n) for p in PRIVATE_PARTS}
    return VerbatimIndex(private, KeyIndex(record_texts(split.records("public")), n))


@dataclass(frozen=True)
class Calibration:
    """The public part's natural rate and the release size's allowance."""

    public_texts: int
    public_matched: int  # public texts matching a held-out text (CALIBRATION_PARTS)
    rate_upper: float  # upper CONFIDENCE bound of the rate, scaled to every private part

    def allowed(self, released: int) -> int:
        """Most matches among ``released`` texts that are not improbable (tail ≥ ALPHA) for
        a release matching at the natural rate."""
        if released == 0:
            return 0
        from scipy.stats import binom

        # smallest k with P[Binomial(n, p) >= k + 1] < ALPHA
        return int(binom.isf(ALPHA, released, self.rate_upper))


def calibrate(index: VerbatimIndex, public_texts: Sequence[str]) -> Calibration:
    """Check each public text against the held-out parts, with its own copy left out of the
    public filter, and scale the rate's upper bound from their texts to every private
    part's: the natural rate of a release that copied nothing, read off no train text."""
    held_out = sum(index.private[p].texts for p in CALIBRATION_PARTS)
    matched = sum(
        bool(index.parts_matched(text_keys(t, index.public.n), 1, CALIBRATION_PARTS))
        for t in public_texts
    )
    if not public_texts or not held_out:
        return Calibration(len(public_texts), matched, NO_PUBLIC_RATE)
    scale = sum(part.texts for part in index.private.values()) / held_out
    rate = min(1.0, upper_bound(matched, len(public_texts)) * scale)
    return Calibration(len(public_texts), matched, rate)


def upper_bound(k: int, n: int, confidence: float = CONFIDENCE) -> float:
    """One-sided Clopper–Pearson upper bound on a rate seen k times in n (n > 0)."""
    if k >= n:
        return 1.0
    from scipy.stats import beta

    return float(beta.ppf(confidence, k + 1, n - k))


@dataclass(frozen=True)
class VerbatimReport:
    """A release's counts, as stored in its record's ``verbatim`` block."""

    released: int
    matched: int  # released texts matching a text of any private part
    exact: int  # of which equal to a private text once normalised
    train: int
    validation: int
    test: int
    allowed: int  # most matches the threshold lets through for this many texts
    public_texts: int
    public_matched: int  # the calibration: public texts that match a held-out text
    natural_rate_upper: float
    calibrated_on: tuple[str, ...]  # the parts public_matched counts (records before: all)
    ngram: int
    over_threshold: bool
    refused: bool  # over the threshold in a private run (ε < ∞): not published

    def to_record(self) -> dict[str, Any]:
        """The block as JSON reads it back (a list where the report holds a tuple)."""
        return {**asdict(self), "calibrated_on": list(self.calibrated_on)}


def check_texts(
    texts: Sequence[str],
    split: FederatedSplit,
    epsilon_budget: float,
    index: VerbatimIndex | None = None,
) -> VerbatimReport:
    """Count the released ``texts`` that copy private texts and decide publication."""
    index = index or build_index(split)
    calibration = calibrate(index, record_texts(split.records("public")))
    per_text = [index.parts_matched(text_keys(t, index.public.n)) for t in texts]
    exact = sum(_exact_copy(index, t) for t in texts)
    matched = sum(bool(parts) for parts in per_text)
    allowed = calibration.allowed(len(texts))
    over = matched > allowed
    return VerbatimReport(
        released=len(texts),
        matched=matched,
        exact=exact,
        **{p: sum(p in parts for parts in per_text) for p in PRIVATE_PARTS},
        allowed=allowed,
        public_texts=calibration.public_texts,
        public_matched=calibration.public_matched,
        natural_rate_upper=calibration.rate_upper,
        calibrated_on=CALIBRATION_PARTS,
        ngram=index.public.n,
        over_threshold=over,
        refused=over and not math.isinf(epsilon_budget),
    )


def _exact_copy(index: VerbatimIndex, text: str) -> bool:
    words = normalised_words(text)
    whole = hash(("text", " ".join(words)))
    return (
        bool(words)
        and index.public.counts.get(whole, 0) == 0
        and any(whole in i.counts for i in index.private.values())
    )


def check_release(
    artifact: Any, split: FederatedSplit, epsilon_budget: float
) -> VerbatimReport | None:
    """The report of a release that publishes text, None for one that publishes none
    (a model alone: the canary audit's loss scores cover that)."""
    texts = released_texts(artifact)
    if not texts:
        return None
    return check_texts(texts, split, epsilon_budget)


def matched_mask(texts: Sequence[str], against: Sequence[str], public: KeyIndex) -> list[bool]:
    """For each of ``texts``, whether it copies one of ``against`` (the same rule, the same
    public filter): the canary audit asks it of each canary's texts against the release."""
    index = KeyIndex(against, public.n)
    return [
        any(k in index.counts and public.counts.get(k, 0) == 0 for k in text_keys(t, public.n))
        for t in texts
    ]
