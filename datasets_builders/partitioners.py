"""Client assignment: which client holds each document.

Every rule is a function ``(items, rng, **params) -> Placement`` registered in
:data:`PARTITIONERS`; :func:`partition` validates the parameters, seeds the generator and
returns one client id (or None: not placed) per item. Rules are deterministic given the
seed and do not depend on the order of ``items``: they work on items sorted by ``key``
(sorted ids, as in Flower's NaturalIdPartitioner, so that every run maps ids the same way).

Rules and their parameters:

- ``natural``: the source's own client id (speaker, user, chapter, …); refuses items
  without one.
- ``document``: one client per document (the client id is the document's ``key``);
  the privacy unit of POPri's bioRxiv split and of preference tuples.
- ``iid``: ``num_clients`` clients drawn uniformly at random; with ``samples_per_client``
  each client gets exactly that many documents and the rest are left out (PrE-Text's
  1,250 clients x 8 samples), otherwise documents are dealt round-robin.
- ``dirichlet``: per label, client shares ~ Dir(``alpha``); resampled up to
  ``max_retries`` times until every client holds ``min_size`` documents.
- ``label_subset``: a ``skewed_fraction`` of the ``num_clients`` clients each hold only
  ``labels_per_client`` labels, the others hold all labels (paper 001's non-IID C_s
  clients; ``skewed_fraction=1`` is the classic pathological split). Labels are handed
  out over a shuffled cycle so every label is covered whenever
  skewed clients x labels_per_client >= labels; a label no client may hold is left out.

Strong/weak client flags (paper 001's resource-adaptive setting) are drawn separately by
:func:`flag_strong` once the training clients are known.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np


class PartitionError(ValueError):
    """A rule cannot be applied to these documents with these parameters."""


@dataclass(frozen=True)
class Item:
    """What a partitioner sees of one document."""

    key: str
    natural: str | None = None
    label: str | None = None


@dataclass
class Placement:
    """A partition: one client id (None: not placed) per item, plus per-client facts."""

    clients: list[str | None]
    client_info: dict[str, dict[str, Any]] = field(default_factory=dict)


Rule = Callable[..., Placement]


def _client_names(num_clients: int) -> list[str]:
    width = len(str(max(num_clients - 1, 0)))
    return [f"client-{i:0{width}d}" for i in range(num_clients)]


def _sorted_indices(items: Sequence[Item]) -> list[int]:
    return sorted(range(len(items)), key=lambda i: items[i].key)


def _require_labels(items: Sequence[Item], rule: str) -> list[str]:
    missing = sum(item.label is None for item in items)
    if missing:
        raise PartitionError(
            f"partition {rule!r} needs a label on every document; {missing} have none "
            "(pick a labelled source or set label_key)"
        )
    return sorted({str(item.label) for item in items})


def _positive(name: str, value: int) -> int:
    if int(value) != value or value < 1:
        raise PartitionError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def natural(items: Sequence[Item], rng: np.random.Generator) -> Placement:
    missing = [item.key for item in items if item.natural is None]
    if missing:
        raise PartitionError(
            f"partition 'natural' needs a client id on every document; {len(missing)} have "
            f"none (e.g. {missing[0]!r}); use 'document', 'iid' or 'dirichlet' instead"
        )
    return Placement([str(item.natural) for item in items])


def document(items: Sequence[Item], rng: np.random.Generator) -> Placement:
    return Placement([item.key for item in items])


def iid(
    items: Sequence[Item],
    rng: np.random.Generator,
    *,
    num_clients: int,
    samples_per_client: int | None = None,
) -> Placement:
    num_clients = _positive("num_clients", num_clients)
    if num_clients > len(items):
        raise PartitionError(f"iid asks for {num_clients} clients but has {len(items)} documents")
    order = rng.permutation(_sorted_indices(items))
    names = _client_names(num_clients)
    clients: list[str | None] = [None] * len(items)
    if samples_per_client is None:
        for position, index in enumerate(order):
            clients[index] = names[position % num_clients]
        return Placement(clients)
    per_client = _positive("samples_per_client", samples_per_client)
    needed = num_clients * per_client
    if needed > len(items):
        raise PartitionError(
            f"iid with {num_clients} clients x {per_client} documents needs {needed} "
            f"documents, but only {len(items)} are left after filtering"
        )
    for position, index in enumerate(order[:needed]):
        clients[index] = names[position // per_client]
    return Placement(clients)


def dirichlet(
    items: Sequence[Item],
    rng: np.random.Generator,
    *,
    num_clients: int,
    alpha: float,
    min_size: int = 1,
    max_retries: int = 10,
) -> Placement:
    num_clients = _positive("num_clients", num_clients)
    if not alpha > 0:
        raise PartitionError(f"alpha must be > 0, got {alpha!r}")
    labels = _require_labels(items, "dirichlet")
    by_label = {label: [] for label in labels}
    for index in _sorted_indices(items):
        by_label[str(items[index].label)].append(index)
    names = _client_names(num_clients)
    for _ in range(_positive("max_retries", max_retries)):
        owner = np.empty(len(items), dtype=np.int64)
        for label in labels:
            members = rng.permutation(by_label[label])
            shares = rng.dirichlet(np.full(num_clients, float(alpha)))
            cuts = (np.cumsum(shares)[:-1] * len(members)).astype(np.int64)
            for client, chunk in enumerate(np.split(members, cuts)):
                owner[chunk] = client
        sizes = np.bincount(owner, minlength=num_clients)
        if sizes.min() >= min_size:
            return Placement([names[c] for c in owner])
    raise PartitionError(
        f"dirichlet(alpha={alpha}) left a client with fewer than {min_size} documents in "
        f"{max_retries} tries; use fewer clients, a larger alpha or a smaller min_size"
    )


def label_subset(
    items: Sequence[Item],
    rng: np.random.Generator,
    *,
    num_clients: int,
    labels_per_client: int,
    skewed_fraction: float = 1.0,
) -> Placement:
    num_clients = _positive("num_clients", num_clients)
    k = _positive("labels_per_client", labels_per_client)
    labels = _require_labels(items, "label_subset")
    if k > len(labels):
        raise PartitionError(f"labels_per_client={k} but the documents have {len(labels)} labels")
    if not 0.0 <= skewed_fraction <= 1.0:
        raise PartitionError(f"skewed_fraction must be in [0, 1], got {skewed_fraction!r}")
    names = _client_names(num_clients)
    n_skewed = round(skewed_fraction * num_clients)
    cycle = [str(label) for label in rng.permutation(labels)]
    holders: dict[str, list[int]] = {label: list(range(n_skewed, num_clients)) for label in labels}
    info: dict[str, dict[str, Any]] = {}
    for client in range(n_skewed):
        subset = sorted(cycle[(client * k + j) % len(cycle)] for j in range(k))
        info[names[client]] = {"labels": subset}
        for label in subset:
            holders[label].append(client)
    clients: list[str | None] = [None] * len(items)
    for index in _sorted_indices(items):
        eligible = holders[str(items[index].label)]
        if eligible:
            clients[index] = names[int(rng.choice(sorted(eligible)))]
    return Placement(clients, info)


PARTITIONERS: dict[str, Rule] = {
    "natural": natural,
    "document": document,
    "iid": iid,
    "dirichlet": dirichlet,
    "label_subset": label_subset,
}


def rule_parameters(rule: str) -> dict[str, Any]:
    """Parameters a rule accepts, with defaults (``inspect.Parameter.empty``: required)."""
    if rule not in PARTITIONERS:
        raise PartitionError(f"unknown partition rule {rule!r}; choose from {sorted(PARTITIONERS)}")
    signature = inspect.signature(PARTITIONERS[rule])
    return {
        name: p.default
        for name, p in signature.parameters.items()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    }


def partition(items: Sequence[Item], rule: str, params: dict[str, Any], seed: int) -> Placement:
    """Apply ``rule`` with ``params``; checks unknown and missing parameters first."""
    accepted = rule_parameters(rule)
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        raise PartitionError(
            f"partition {rule!r} does not take {unknown}; it takes {sorted(accepted) or 'nothing'}"
        )
    missing = sorted(
        n for n, d in accepted.items() if d is inspect.Parameter.empty and n not in params
    )
    if missing:
        raise PartitionError(f"partition {rule!r} needs {missing}")
    rng = np.random.default_rng([seed, sorted(PARTITIONERS).index(rule)])
    placement = PARTITIONERS[rule](items, rng, **params)
    if len(placement.clients) != len(items):
        raise PartitionError(f"partition {rule!r} placed {len(placement.clients)} of {len(items)}")
    return placement


def flag_strong(client_ids: Sequence[str], fraction: float, seed: int) -> set[str]:
    """Pick ``round(fraction * n)`` strong clients uniformly at random (the rest are weak)."""
    if not 0.0 <= fraction <= 1.0:
        raise PartitionError(f"strong_fraction must be in [0, 1], got {fraction!r}")
    ordered = sorted(client_ids)
    chosen = np.random.default_rng([seed, 7919]).permutation(len(ordered))
    return {ordered[i] for i in chosen[: round(fraction * len(ordered))]}
