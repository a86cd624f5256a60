"""Partitioners: counts, disjointness, determinism, label skew, parameter checks."""

from __future__ import annotations

import random
from collections import Counter, defaultdict

import pytest

from datasets_builders.partitioners import Item, PartitionError, flag_strong, partition


def labelled(n: int, labels: str = "abcde") -> list[Item]:
    return [Item(f"doc{i:04d}", f"user{i % 7}", labels[i % len(labels)]) for i in range(n)]


def labels_per_client(items: list[Item], clients: list[str | None]) -> dict[str, set[str]]:
    held: dict[str, set[str]] = defaultdict(set)
    for item, client in zip(items, clients, strict=True):
        if client is not None:
            held[client].add(str(item.label))
    return held


def test_natural_uses_the_source_ids_and_refuses_missing_ones():
    items = labelled(30)
    assert partition(items, "natural", {}, 0).clients == [i.natural for i in items]
    with pytest.raises(PartitionError, match="needs a client id"):
        partition([*items, Item("orphan")], "natural", {}, 0)


def test_document_gives_each_document_its_own_client():
    items = labelled(30)
    clients = partition(items, "document", {}, 0).clients
    assert clients == [i.key for i in items] and len(set(clients)) == 30


def test_iid_with_samples_per_client_gives_exact_counts_and_leaves_the_rest_out():
    items = labelled(100)
    clients = partition(items, "iid", {"num_clients": 12, "samples_per_client": 8}, 3).clients
    sizes = Counter(c for c in clients if c is not None)
    assert len(sizes) == 12 and set(sizes.values()) == {8}
    assert clients.count(None) == 100 - 96
    with pytest.raises(PartitionError, match="needs 104 documents"):
        partition(items, "iid", {"num_clients": 13, "samples_per_client": 8}, 3)


def test_iid_round_robin_is_balanced_and_independent_of_item_order():
    items = labelled(103)
    first = dict(zip(items, partition(items, "iid", {"num_clients": 10}, 5).clients, strict=True))
    shuffled = items[:]
    random.Random(1).shuffle(shuffled)
    second = partition(shuffled, "iid", {"num_clients": 10}, 5).clients
    assert dict(zip(shuffled, second, strict=True)) == first
    assert sorted(Counter(first.values()).values()) == [10] * 7 + [11] * 3
    other_seed = partition(items, "iid", {"num_clients": 10}, 6).clients
    assert other_seed != [first[i] for i in items]


def test_dirichlet_is_deterministic_and_small_alpha_skews_labels():
    items = labelled(2000)
    params = {"num_clients": 20, "alpha": 0.1}
    a = partition(items, "dirichlet", params, 0).clients
    assert a == partition(items, "dirichlet", params, 0).clients
    assert a != partition(items, "dirichlet", params, 1).clients
    assert None not in a and len(set(a)) == 20

    def mean_dominant_share(clients: list[str | None]) -> float:
        per_client: dict[str, Counter] = defaultdict(Counter)
        for item, client in zip(items, clients, strict=True):
            per_client[str(client)][item.label] += 1
        shares = [max(c.values()) / sum(c.values()) for c in per_client.values()]
        return sum(shares) / len(shares)

    flat = partition(items, "dirichlet", {"num_clients": 20, "alpha": 100.0}, 0).clients
    assert mean_dominant_share(a) > 0.6 > 0.35 > mean_dominant_share(flat)


def test_dirichlet_needs_labels_and_reports_impossible_min_size():
    with pytest.raises(PartitionError, match="needs a label"):
        partition([Item("x")], "dirichlet", {"num_clients": 2, "alpha": 1.0}, 0)
    with pytest.raises(PartitionError, match="fewer than 5 documents"):
        partition(labelled(20), "dirichlet", {"num_clients": 10, "alpha": 0.1, "min_size": 5}, 0)


def test_label_subset_restricts_skewed_clients_and_covers_every_label():
    items = labelled(1000, labels="abcdefgh")
    params = {"num_clients": 10, "labels_per_client": 2}
    placement = partition(items, "label_subset", params, 4)
    held = labels_per_client(items, placement.clients)
    assert all(len(labels) == 2 for labels in held.values())
    assert set().union(*held.values()) == set("abcdefgh")
    assert None not in placement.clients  # 10 clients x 2 labels cover all 8 labels
    assert {c: set(i["labels"]) for c, i in placement.client_info.items()} == held


def test_label_subset_with_a_skewed_fraction_keeps_other_clients_uniform():
    items = labelled(3000, labels="abcdef")
    params = {"num_clients": 10, "labels_per_client": 1, "skewed_fraction": 0.3}
    placement = partition(items, "label_subset", params, 0)
    held = labels_per_client(items, placement.clients)
    skewed = set(placement.client_info)
    assert len(skewed) == 3
    assert all(len(held[c]) == 1 for c in skewed)
    assert all(len(held[c]) == 6 for c in held if c not in skewed)
    with pytest.raises(PartitionError, match="labels_per_client=7"):
        partition(items, "label_subset", {"num_clients": 4, "labels_per_client": 7}, 0)


def test_parameters_are_checked_by_name():
    with pytest.raises(PartitionError, match="does not take"):
        partition(labelled(10), "document", {"num_clients": 3}, 0)
    with pytest.raises(PartitionError, match=r"needs \['num_clients'\]"):
        partition(labelled(10), "iid", {}, 0)
    with pytest.raises(PartitionError, match="unknown partition rule"):
        partition(labelled(10), "random", {}, 0)


def test_flag_strong_picks_the_fraction_deterministically():
    clients = [f"c{i}" for i in range(50)]
    strong = flag_strong(clients, 0.3, 0)
    assert len(strong) == 15 and strong <= set(clients)
    assert strong == flag_strong(list(reversed(clients)), 0.3, 0)
    assert strong != flag_strong(clients, 0.3, 1)
    assert flag_strong(clients, 0.0, 0) == set()
