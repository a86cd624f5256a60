"""The privacy boundary: what server code can and cannot get from the client pool."""

import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from benchmark.federation.clients import ClientData
from benchmark.federation.pool import ClientPool, clipped_row_sum
from benchmark.federation.tree import covering_nodes
from benchmark.privacy.errors import PrivacyError
from benchmark.privacy.ledger import (
    NONPRIVATE,
    SUBSAMPLED_GAUSSIAN,
    TREE_AGGREGATION,
    PrivacyLedger,
)


def make_pool(n=6, seed=0, allow_nonprivate=False, independence_checks=8):
    clients = {
        f"c{i}": [{"text": f"client {i} says {j}", "label": i} for j in range(2)] for i in range(n)
    }
    return ClientPool(
        clients,
        ledger=PrivacyLedger(),
        seed=seed,
        allow_nonprivate=allow_nonprivate,
        independence_checks=independence_checks,
    )


def count_chars(client: ClientData, payload) -> np.ndarray:
    return np.array([sum(len(t) for t in client.texts), 1.0])


def leak_client_data(pool: ClientPool) -> ClientData:
    """The ClientData object a client function hands out to the server side."""
    leaked = []
    pool.aggregate(
        lambda c, p: leaked.append(c) or np.zeros(1),
        dim=1,
        clip_norm=1,
        noise_multiplier=1.0,
        label="leak",
    )
    return leaked[0]


def test_server_cannot_read_client_texts():
    pool = make_pool()
    with pytest.raises(PrivacyError, match="only receives clipped, noised aggregates"):
        pool.clients  # noqa: B018
    leaked = leak_client_data(pool)
    with pytest.raises(PrivacyError, match="server-side code tried to read client texts"):
        leaked.texts  # noqa: B018


def test_client_data_cannot_be_pickled_out():
    import pickle

    leaked = leak_client_data(make_pool())
    with pytest.raises(PrivacyError):
        pickle.dumps(leaked)


def test_noise_and_clipping_cannot_be_skipped():
    pool = make_pool()
    with pytest.raises(PrivacyError, match="only allowed in a non-private run"):
        pool.aggregate(count_chars, dim=2, clip_norm=1.0, noise_multiplier=0.0, label="x")
    for unbounded in (float("inf"), 1e38):  # 1e38: a sum of a few such rows overflows float32
        with pytest.raises(PrivacyError, match="clip_norm in"):
            pool.aggregate(count_chars, dim=2, clip_norm=unbounded, noise_multiplier=1.0, label="x")
    with pytest.raises(PrivacyError, match="must return numbers"):
        pool.aggregate(
            lambda c, p: np.array(c.texts), dim=2, clip_norm=1.0, noise_multiplier=1.0, label="x"
        )
    with pytest.raises(PrivacyError, match="centralized access"):
        pool.centralized(lambda cs: None, label="x")
    assert pool.ledger.releases == []


def test_rows_are_clipped_and_summed_in_float64_whatever_type_the_client_side_sent():
    """In float16 the sum of 1,001 rows of 65.5 overflows to inf, and 3,000 and 3,001 unit
    rows sum alike: whether a sum is finite, or a client counts at all, would depend on
    the data, whatever the noise."""
    big = np.full((1001, 1), 65.5, np.float16)
    assert clipped_row_sum(big, 100.0).tolist() == [65565.5]
    for n in (3000, 3001):
        assert clipped_row_sum(np.ones((n, 1), np.float16), 1.0).tolist() == [float(n)]
    rows = np.random.default_rng(0).normal(size=(7, 3)).astype(np.float32)
    wide = rows.astype(np.float64)
    clipped = wide * np.minimum(1.0, 0.5 / np.linalg.norm(wide, axis=1))[:, None]
    np.testing.assert_allclose(clipped_row_sum(rows, 0.5), clipped.sum(0), rtol=1e-15)
    assert clipped_row_sum(rows, 0.5).dtype == np.float64
    reused = np.full(3, np.nan)  # the pool's buffer, reused across a release's clients
    assert clipped_row_sum(rows, 0.5, out=reused) is reused
    assert reused.tobytes() == clipped_row_sum(rows, 0.5).tobytes()


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_non_finite_row_is_refused_before_any_noise_or_ledger_entry(bad):
    """Clipping cannot bound a NaN or an infinity: one would pass through the sum whatever
    the noise, so the release is refused."""
    pool = make_pool()

    def one_bad(client, payload):
        row = count_chars(client, payload)
        return np.array([bad, row[1]]) if client.texts[0].startswith("client 3") else row

    with pytest.raises(PrivacyError, match="non-finite"):
        pool.aggregate(one_bad, dim=2, clip_norm=1.0, noise_multiplier=1.0, label="x")
    assert pool.ledger.releases == []


def test_aggregate_clips_each_client_and_adds_declared_noise():
    nonprivate = make_pool(allow_nonprivate=True)
    exact = nonprivate.aggregate(count_chars, dim=2, clip_norm=1.0, noise_multiplier=0.0, label="a")
    # every client's vector has norm > 1, so each contributes exactly a unit vector
    rows = np.array([[sum(len(f"client {i} says {j}") for j in range(2)), 1.0] for i in range(6)])
    unit_rows = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    np.testing.assert_allclose(exact.noisy_sum, unit_rows.sum(0))
    assert nonprivate.ledger.releases[0].mechanism == NONPRIVATE

    noisy = [  # the noise's statistics; the independence check has tests of its own
        make_pool(seed=s, independence_checks=0)
        .aggregate(count_chars, dim=2, clip_norm=1.0, noise_multiplier=5.0, label="a")
        .noisy_sum
        for s in range(300)
    ]
    residual = np.array(noisy) - exact.noisy_sum
    assert abs(residual.std() - 5.0) < 0.4  # noise std = sigma * clip
    assert abs(residual.mean()) < 0.5


def test_release_is_recorded_and_costs_counted():
    pool = make_pool()
    payload = {"model": np.zeros(10), "prompts": ["a", "b"]}
    pool.aggregate(count_chars, payload, dim=2, clip_norm=1.0, noise_multiplier=2.0, label="r0")
    (release,) = pool.ledger.releases
    assert (release.mechanism, release.noise_multiplier, release.sensitivity) == (
        SUBSAMPLED_GAUSSIAN,
        2.0,
        1.0,
    )
    assert (release.sample_rate, release.sampling, release.count) == (1.0, "full", 1)
    summary = pool.costs.summary()
    assert summary["floats_down_per_client_round"] == 10
    assert summary["texts_down_per_client_round"] == 2
    assert summary["floats_up_per_client_round"] == 2
    assert summary["participations"] == 6


def test_poisson_sampling_is_seeded_and_hides_the_count():
    counts = []
    for seed in (0, 1, 0):
        pool = make_pool(n=200, seed=seed)
        agg = pool.aggregate(
            lambda c, p: np.ones(1),
            dim=1,
            clip_norm=1.0,
            noise_multiplier=1e-9,
            sample_rate=0.25,
            label="p",
        )
        counts.append(round(agg.noisy_sum[0]))  # the sampled count, seen only in this test
        assert agg.expected_count == 50
        assert pool.ledger.releases[0].sampling == "poisson"
        assert pool.costs.participations == 50  # published costs use the expected count
    assert counts[0] != counts[1] and counts[0] == counts[2]
    assert all(20 < c < 80 for c in counts)


def test_batched_client_function_rows_are_clipped_separately():
    pool = make_pool(allow_nonprivate=True)

    def batched(batch, payload):
        means = batch.memo_rows("n", lambda cs: np.array([[len(c.texts) * 10.0] for c in cs]))
        return means

    agg = pool.aggregate(
        batched, dim=1, clip_norm=1.0, noise_multiplier=0.0, label="b", batched=True
    )
    assert agg.noisy_sum[0] == pytest.approx(6.0)


def test_covering_nodes_partition_prefix():
    for t in range(1, 40):
        nodes = covering_nodes(t)
        covered = sorted(i for lvl, idx in nodes for i in range(idx << lvl, (idx + 1) << lvl))
        assert covered == list(range(t))
        assert len(nodes) <= t.bit_length()


def test_tree_aggregation_prefix_sums_and_single_participation():
    pool = make_pool(n=8, allow_nonprivate=True)
    leaves = pool.open_tree("t", dim=1, clip_norm=1.0, noise_multiplier=1e-12, cohort_size=2)
    assert leaves == 4
    (release,) = pool.ledger.releases
    assert release.mechanism == TREE_AGGREGATION and release.count == 4
    sums = [pool.tree_step("t", lambda c, p: np.array([0.5]))[0] for _ in range(4)]
    np.testing.assert_allclose(sums, [1.0, 2.0, 3.0, 4.0], atol=1e-9)
    with pytest.raises(PrivacyError, match="no client contributes twice"):
        pool.tree_step("t", lambda c, p: np.array([0.5]))


def test_tree_every_client_shares_out_the_clients_a_plain_split_leaves_over():
    """10 clients, cohorts of 3: a plain split takes 9 (one left over); every_client puts
    all 10 in the 3 leaves (3, 3 and 4), each once."""
    plain = make_pool(n=10, allow_nonprivate=True)
    plain.open_tree("t", dim=1, clip_norm=1.0, noise_multiplier=1e-12, cohort_size=3)
    sums = [plain.tree_step("t", lambda c, p: np.array([1.0]))[0] for _ in range(3)]
    np.testing.assert_allclose(sums, [3.0, 6.0, 9.0], atol=1e-9)

    pool = make_pool(n=10, allow_nonprivate=True)
    leaves = pool.open_tree(
        "t", dim=1, clip_norm=1.0, noise_multiplier=1e-12, cohort_size=3, every_client=True
    )
    assert leaves == 3 and pool.ledger.releases[0].count == 3
    sums = [pool.tree_step("t", lambda c, p: np.array([1.0]))[0] for _ in range(3)]
    np.testing.assert_allclose(sums[-1], 10.0, atol=1e-9)
    assert sorted(np.diff([0.0, *sums]).round().astype(int).tolist()) == [3, 3, 4]
    with pytest.raises(PrivacyError, match="larger than cohort_size"):
        make_pool(n=10, allow_nonprivate=True).open_tree(
            "t",
            dim=1,
            clip_norm=1.0,
            noise_multiplier=1e-12,
            cohort_size=2,
            max_leaves=3,
            every_client=True,
        )


def test_pool_state_round_trip_reproduces_noise():
    a, b = make_pool(seed=3), make_pool(seed=3)
    a.aggregate(count_chars, dim=2, clip_norm=1.0, noise_multiplier=1.0, label="x")
    b.load_state_dict(a.state_dict())
    x = a.aggregate(count_chars, dim=2, clip_norm=1.0, noise_multiplier=1.0, label="y")
    y = b.aggregate(count_chars, dim=2, clip_norm=1.0, noise_multiplier=1.0, label="y")
    np.testing.assert_array_equal(x.noisy_sum, y.noisy_sum)


def test_dp_sgd_trains_and_records_one_poisson_release():
    import torch

    clients = {f"s{i}": [{"text": "x", "label": float(i % 2)}] for i in range(64)}
    pool = ClientPool(clients, ledger=PrivacyLedger(), seed=0, unit="sample")
    model = torch.nn.Linear(1, 1)
    before = model.weight.detach().clone()

    def encode(records):
        y = torch.tensor([[r["label"]] for r in records])
        return {"x": torch.ones(len(records), 1), "y": y}

    def loss_fn(m, batch):
        return torch.nn.functional.mse_loss(m(batch["x"]), batch["y"])

    trained = pool.dp_sgd(
        model,
        encode,
        loss_fn,
        noise_multiplier=1.0,
        clip_norm=1.0,
        batch_size=16,
        steps=5,
        lr=0.1,
        label="dpsgd",
    )
    assert not torch.equal(trained.weight.detach(), before)
    (release,) = pool.ledger.releases
    assert (release.sampling, release.count, release.sample_rate) == ("poisson", 5, 0.25)
    user_level = make_pool()
    with pytest.raises(PrivacyError, match="one example"):
        user_level.dp_sgd(
            model,
            encode,
            loss_fn,
            noise_multiplier=1.0,
            clip_norm=1.0,
            batch_size=2,
            steps=1,
            lr=0.1,
            label="x",
        )


def _wide_rows(batch, payload):
    """A batched client function whose rows (80 x 4,096 float32, 1.25 MiB) go through the
    client worker's shared memory file."""
    return np.stack(
        [np.full(payload, float(c.texts[0]) + 1.0, dtype=np.float32) for c in batch.clients]
    )


def test_a_large_batched_release_streams_in_blocks_and_equals_the_in_process_one(
    tmp_path, monkeypatch
):
    """A batched call's rows larger than SHARED_ROWS_BYTES leave the client worker through
    shared memory, and the pool reads them in blocks (forced to 64 KiB here, so 20 blocks
    of 4 rows): the clipped, noised sum is the in-process one, to float32 summation order."""
    import sys

    import cloudpickle

    from benchmark.isolation import client_process
    from benchmark.protocol.jobs import snapshot
    from benchmark.untrusted import client_worker

    monkeypatch.setattr(client_process, "SHARED_BLOCK_BYTES", 1 << 16)
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    data = {f"c{i:03d}": [{"text": str(i)}] for i in range(80)}
    dim = 4096
    assert 80 * dim * 4 > client_worker.SHARED_ROWS_BYTES
    worker = client_process.ClientProcess([data[c] for c in sorted(data)], None, 1, tmp_path)
    job = snapshot(_wide_rows, dim)  # what an isolated method process sends
    blocks: list[int] = []
    row_blocks = ClientPool._row_blocks.__func__

    def counted(cls, outputs, count, dim):
        for offset, rows in row_blocks(cls, outputs, count, dim):
            blocks.append(len(rows))
            yield offset, rows

    monkeypatch.setattr(ClientPool, "_row_blocks", classmethod(counted))
    try:
        releases = [
            ClientPool(data, ledger=PrivacyLedger(), seed=7, **extra)
            .aggregate(
                fn, payload, dim=dim, clip_norm=50.0, noise_multiplier=1.0, label="wide",
                batched=True,
            )
            .noisy_sum
            for fn, payload, extra in ((_wide_rows, dim, {}), (job, None, {"executor": worker}))
        ]  # fmt: skip
    finally:
        worker.close()
    assert blocks == [80] + [4] * 20  # in process one block, isolated 20
    np.testing.assert_allclose(releases[1], releases[0], rtol=1e-5, atol=1e-3)
    expected = sum(min(1.0, 50.0 / ((i + 1.0) * 64.0)) * (i + 1.0) for i in range(80))
    assert abs(float(np.mean(releases[0])) - expected) < 5 * 50.0 / 64


def _host_blocks(rows: np.ndarray, sizes: list[int]) -> Iterator[Any]:
    """A client-shard host's stream: its rows in blocks of ``sizes``, then its end marker."""
    from benchmark.isolation.client_shards import END

    cuts = np.cumsum([0, *sizes])
    return iter([rows[a:b] for a, b in itertools.pairwise(cuts)] + [END])


def test_sharded_blocks_are_merged_in_the_order_asked_for_without_gathering_the_call():
    """Two Ray shard hosts stream their positions' rows in blocks; the coordinator hands
    them on in the order of the call, in blocks no larger than the largest a host sent
    plus one run, and reads nothing past a host's rows (its end marker comes next)."""
    from benchmark.isolation.client_shards import merge_blocks

    owner = np.array([0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 0, 0])
    rows = np.arange(len(owner) * 3, dtype=np.float32).reshape(-1, 3)
    parts = {h: np.flatnonzero(owner == h).tolist() for h in (0, 1)}
    streams = {0: _host_blocks(rows[parts[0]], [2, 2, 3]), 1: _host_blocks(rows[parts[1]], [3, 2])}
    blocks = list(merge_blocks(streams, parts, len(owner)))
    np.testing.assert_array_equal(np.concatenate(blocks), rows)
    assert len(blocks) > 1 and max(len(b) for b in blocks) <= 3 + 2
    from benchmark.isolation.client_shards import END

    assert [next(s) for s in streams.values()] == [END, END]


@pytest.mark.parametrize(
    ("sizes", "message"),
    [([2, 2, 4], "more rows than clients"), ([2, 2], "fewer rows than clients")],
)
def test_a_shard_host_that_sends_too_many_or_too_few_rows_is_refused(sizes, message):
    """(Rows a host sends after its positions' are caught by the end-marker check.)"""
    from benchmark.isolation.client_shards import merge_blocks

    rows = np.ones((8, 3))
    parts = {0: list(range(7))}
    with pytest.raises(PrivacyError, match=message):
        list(merge_blocks({0: _host_blocks(rows, sizes)}, parts, 7))


def test_a_shard_host_that_sends_text_is_refused_before_any_join():
    from benchmark.isolation.client_shards import merge_blocks

    text = iter([np.array([["raw client text"]]), (0, 0)])
    with pytest.raises(PrivacyError, match="one 1-D vector per client"):
        list(merge_blocks({0: iter([np.ones((1, 1))]), 1: text}, {0: [0], 1: [1]}, 2))
