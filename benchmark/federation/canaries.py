"""Canary units for the one-run privacy audit (:mod:`benchmark.privacy.audit`): the
coordinator's side, which alone knows which canaries are in the run.

A run whose evaluation lists the ``canary`` metric gets ``m = min(1000, n_units // 10)``
canaries (none below :data:`MIN_CANARIES`). Each is one privacy unit holding one record
whose text is a marker: :data:`MARKER_WORDS` words drawn from the split's *public*
vocabulary, so no model has a prior for the sequence and whatever a release knows of it
came from the canary. Each canary is in the run with probability 1/2 (Steinke et al.'s
Algorithm 1); the bits and the texts come from the run's pool seed through a stream of
their own, so they are in neither the spec nor the record, and a resumed run draws the same
ones. The included canaries join the train units under random ids before the pool exists;
the method process and the client workers see them as ordinary units. The evaluator
scores all m after the release (:mod:`benchmark.evaluation.canary_audit`).

Record shape: a copy of a random real unit's first record with its text fields replaced
(``text``; for preference tuples ``prompt`` / ``chosen`` / ``rejected`` are the marker's
first half, its second half, and that half reversed), so client functions that read other fields
(dates, labels) run unchanged. The copied non-text fields are a real unit's metadata; they
are not counted twice by the accountant because no text of that unit is copied.

Not covered: an adapter whose client code recognises canaries (a marker is not natural
text) can leave them out and evade the audit. The audit measures how much a release
reveals about units it treated like any other; it is a check on the accounting, not a
proof against an adversary (``docs/architecture.md``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from benchmark.data import CLIENT_ID, TEXT

MAX_CANARIES = 1000
MIN_CANARIES = 10
MARKER_WORDS = 8
MIN_VOCABULARY = 20
CANARY_STREAM = 0xCA7A  # the plan's own stream of the pool seed
PAIR_FIELDS = ("prompt", "chosen", "rejected")


@dataclass(frozen=True)
class CanaryPlan:
    """The m canary texts, which of them are in the run, and the run's δ."""

    texts: tuple[str, ...]
    included: tuple[bool, ...]
    delta: float
    blind: bool  # False when the bits can be derived from the public spec (noise_seed: spec)


def canary_count(n_units: int) -> int:
    """m: the paper's 1,000 at most, and about 5 % of the population after inclusion."""
    m = min(MAX_CANARIES, n_units // 10)
    return m if m >= MIN_CANARIES else 0


def marker_vocabulary(public_texts: list[str]) -> list[str]:
    """The distinct lower-case words (3-12 letters) of the public texts, sorted."""
    return sorted({w for t in public_texts for w in re.findall(r"[a-z]{3,12}", t.lower())})


def plan_canaries(
    public_texts: list[str], n_units: int, seed: int, delta: float, blind: bool
) -> CanaryPlan:
    """Draw the canaries of a run with ``n_units`` privacy units from its pool ``seed``."""
    m = canary_count(n_units)
    if m == 0:
        raise ValueError(
            f"the canary audit needs at least {10 * MIN_CANARIES} privacy units, "
            f"the split has {n_units}"
        )
    vocabulary = marker_vocabulary(public_texts)
    if len(vocabulary) < MIN_VOCABULARY:
        raise ValueError(
            f"the canary audit draws its markers from the public part's words; it has "
            f"{len(vocabulary)} distinct words, fewer than {MIN_VOCABULARY}"
        )
    rng = np.random.default_rng([seed % 2**63, CANARY_STREAM])
    texts = tuple(" ".join(rng.choice(vocabulary, MARKER_WORDS)) for _ in range(m))
    included = tuple(bool(b) for b in rng.random(m) < 0.5)
    return CanaryPlan(texts, included, delta, blind)


def with_canaries(
    units: dict[str, list[dict[str, Any]]], plan: CanaryPlan, seed: int
) -> dict[str, list[dict[str, Any]]]:
    """``units`` plus one unit per included canary (random ids, records shaped like real ones)."""
    rng = np.random.default_rng([seed % 2**63, CANARY_STREAM, 1])
    real = sorted(units)
    out = dict(units)
    for text, included in zip(plan.texts, plan.included, strict=True):
        if not included:
            continue
        unit_id = f"{int(rng.integers(2**62)):016x}"
        while unit_id in out:
            unit_id = f"{int(rng.integers(2**62)):016x}"
        template = units[real[int(rng.integers(len(real)))]][0]
        out[unit_id] = [canary_record(template, text, unit_id)]
    return out


def canary_record(template: dict[str, Any], text: str, unit_id: str) -> dict[str, Any]:
    """``template`` with its text fields replaced by the canary's marker (and nothing of
    another canary: an excluded one must appear nowhere in the run)."""
    record = {**template, TEXT: text, CLIENT_ID: unit_id}
    if all(k in template for k in PAIR_FIELDS):
        record.update(canary_pair(text))
    return record


def canary_pair(text: str) -> dict[str, str]:
    """A marker as a preference tuple: its first half the prompt, its second half chosen
    over the same words reversed."""
    words = text.split()
    prompt, chosen = words[: len(words) // 2], words[len(words) // 2 :]
    return {
        "prompt": " ".join(prompt),
        "chosen": " ".join(chosen),
        "rejected": " ".join(chosen[::-1]),
    }
