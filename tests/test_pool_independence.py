"""The pool enforces its boundary: rows recomputed alone, plain numbers, no rewinding."""

import math
import os
import random
import time

import numpy as np
import pytest

from benchmark.federation.pool import ClientPool, plain_number
from benchmark.privacy.errors import PrivacyError
from benchmark.privacy.ledger import PrivacyLedger

MIXED = "depends on other clients or on state"


def make_pool(n=6, seed=0, **options):
    clients = {f"c{i}": [{"text": f"client {i} says {'hi ' * i}", "label": i}] for i in range(n)}
    return ClientPool(clients, ledger=PrivacyLedger(), seed=seed, **options)


def release(pool, fn, dim=2, payload=None, **options):
    options = {"clip_norm": 100.0, "noise_multiplier": 1.0, "label": "r", **options}
    return pool.aggregate(fn, payload, dim=dim, **options)


def own_row(client, payload):
    return np.array([len(client.texts[0]), client.labels[0]], dtype=float)


def own_rows(batch, payload):
    return np.stack([own_row(c, payload) for c in batch.clients])


def mean_of_batch(batch, payload):
    """Row i is the mean over every client in the batch."""
    rows = own_rows(batch, payload)
    return np.repeat(rows.mean(0, keepdims=True), len(rows), axis=0)


_SEEN: list[float] = []


def previous_clients_label(client, payload):
    """Each row carries the label of the client seen before (module state)."""
    row = np.array([client.labels[0], _SEEN[-1] if _SEEN else 0.0])
    _SEEN.append(client.labels[0])
    return row


class Counter:
    """Each row is the number of clients seen so far (object state)."""

    def __init__(self):
        self.seen = 0

    def __call__(self, client, payload):
        self.seen += 1
        return np.array([self.seen, client.labels[0]], dtype=float)


def refused_and_unrecorded(pool, fn, **options):
    with pytest.raises(PrivacyError, match=MIXED):
        release(pool, fn, **options)
    assert pool.ledger.releases == []
    release(pool, own_row)  # the refused release used no release index
    assert [r.label for r in pool.ledger.releases] == ["r"]


def test_batched_function_that_mixes_rows_is_refused():
    refused_and_unrecorded(make_pool(), mean_of_batch, batched=True)


def faint_signs_of_client_zero(batch, payload):
    """Every row is its own client's, plus a faint copy of client 0's label's sign pattern
    (±0.9e-5 of the row's norm in each of 100 coordinates): within a per-coordinate
    tolerance of 1e-5, yet coherent across all rows, so the release's sum carries it
    n times over (the channel session 35's audit found)."""
    signs = np.where(np.arange(100) % (2 + batch.clients[0].labels[0]) == 0, 1.0, -1.0)
    rows = np.ones((len(batch.clients), 100)) * np.array(
        [[c.labels[0] + 1.0] for c in batch.clients]
    )
    return rows + 0.9e-5 * np.linalg.norm(rows, axis=1, keepdims=True) * signs


def test_a_faint_copy_of_another_client_in_every_row_is_refused():
    refused_and_unrecorded(make_pool(), faint_signs_of_client_zero, batched=True, dim=100)


def test_rows_match_within_a_share_of_the_whole_row_or_of_the_floor():
    from benchmark.federation.independence_check import TOLERANCE, rows_match

    want = {"row": np.full((1, 400), 0.5)}  # norm 10
    near = {"row": want["row"] + 0.99 * TOLERANCE * 10 / 20}  # distance 0.99 x TOLERANCE x 10
    spread = {"row": want["row"] + 0.99 * TOLERANCE * 10 / 10}  # twice that in L2
    assert rows_match(want, near) and not rows_match(want, spread)
    assert rows_match(want, spread, floor=20.0)  # a clip norm of 20 allows twice as much
    assert not rows_match(want, {"row": want["row"].reshape(2, 200)})
    huge = {"row": np.full((1, 4), 1e160)}  # its norm overflows: no allowance is infinite
    assert not rows_match(huge, {"row": huge["row"] * np.array([1.0, -1.0, 0.3, 0.0])})
    ids = {"ids": np.array([[20_000, 7]])}  # a token id one off is another token
    assert not rows_match(ids, {"ids": np.array([[20_001, 7]])})
    assert not rows_match(want, near, exact=True) and rows_match(want, want, exact=True)
    # in L1 (a Laplace sum's sensitivity), a shift spread over many coordinates counts whole
    wide = {"row": np.full((1, 10_000), 1e-3)}  # L1 norm 10, L2 norm 0.1
    spread_thin = {"row": wide["row"] + 0.5e-7}  # L2 distance 0.5e-5, L1 distance 5e-4
    assert rows_match(wide, spread_thin) and not rows_match(wide, spread_thin, order=1)


def test_rows_match_compares_a_row_longer_than_a_block_as_one_row():
    """The check reads a long row a block at a time: a shift past the first block counts,
    and what it may be is a share of the whole row's norm, not of one block's."""
    from benchmark.federation.independence_check import BLOCK, TOLERANCE, rows_match

    want = {"row": np.full((1, BLOCK + 3), 0.5, np.float32)}
    norm = 0.5 * math.sqrt(BLOCK + 3)

    def shifted_tail(distance: float) -> dict[str, np.ndarray]:
        row = want["row"].copy()
        row[0, -3:] += np.float32(distance / math.sqrt(3))  # only in the second block
        return {"row": row}

    assert rows_match(want, shifted_tail(0.5 * TOLERANCE * norm))
    assert not rows_match(want, shifted_tail(2 * TOLERANCE * norm))
    with pytest.raises(ValueError, match="order"):
        rows_match(want, want, order=3)


def test_memo_rows_computed_from_several_clients_are_refused():
    def mixed_memo(batch, payload):
        return batch.memo_rows("m", lambda cs: np.repeat([[float(len(cs)), 1.0]], len(cs), 0))

    refused_and_unrecorded(make_pool(), mixed_memo, batched=True)


@pytest.mark.parametrize("fn", [previous_clients_label, Counter()], ids=["global", "attribute"])
def test_per_client_function_with_state_across_clients_is_refused(fn):
    _SEEN.clear()
    refused_and_unrecorded(make_pool(), fn)


_KEPT: dict[int, int] = {}


def uses_what_earlier_releases_kept(client, payload):
    """Keeps every client's text length in a module global; with ``payload`` set, adds the
    lengths kept so far (other clients' data) to its row."""
    row = np.array([len(client.texts[0]), sum(_KEPT.values()) if payload else 0])
    _KEPT[client.labels[0]] = len(client.texts[0])
    return row


def test_data_kept_from_an_earlier_release_is_refused_when_used():
    _KEPT.clear()
    pool = make_pool()
    release(pool, uses_what_earlier_releases_kept, payload=False)  # rows still per-client
    with pytest.raises(PrivacyError, match=MIXED):
        release(pool, uses_what_earlier_releases_kept, payload=True)
    assert len(pool.ledger.releases) == 1


def test_function_that_needs_an_earlier_client_is_refused():
    store = {}

    def relative_to_client_0(client, payload):
        if client.labels[0] == 0:
            store["base"] = len(client.texts[0])
        return np.array([len(client.texts[0]) - store["base"], 1.0])

    pool = make_pool()
    with pytest.raises(PrivacyError, match="recomputed alone, it raised KeyError"):
        release(pool, relative_to_client_0)
    assert pool.ledger.releases == []


def slow_when_alone(client, pool_pid):
    """Quick in the pool's process (its pid is the payload), 60 s in a recomputing one."""
    if os.getpid() != pool_pid:
        time.sleep(60)
    return own_row(client, pool_pid)


def test_a_check_that_cannot_finish_refuses_the_release_and_says_what_it_allowed(monkeypatch):
    from benchmark.federation import independence_check

    pool = make_pool()
    release(pool, own_row)
    monkeypatch.setattr(independence_check, "GRACE_S", 3.0)
    started = time.monotonic()
    with pytest.raises(
        PrivacyError, match=r"did not finish: .* longer than the 3 s \+ 4 x the release's own time"
    ):
        release(pool, slow_when_alone, payload=os.getpid())
    assert time.monotonic() - started < 50  # the deadline, not the sleep, ended it
    assert len(pool.ledger.releases) == 1


def test_batched_randomness_that_depends_on_the_batch_is_refused():
    def noisy_rows(batch, payload):
        return own_rows(batch, payload) + np.random.rand(len(batch), 2)

    refused_and_unrecorded(make_pool(), noisy_rows, batched=True)


def test_tree_steps_are_checked():
    pool = make_pool(n=8)
    pool.open_tree("t", dim=2, clip_norm=100.0, noise_multiplier=1.0, cohort_size=4)
    with pytest.raises(PrivacyError, match=MIXED):
        pool.tree_step("t", mean_of_batch, batched=True)
    pool.tree_step("t", own_rows, batched=True)  # the refused step did not use the leaf
    pool.tree_step("t", own_row)
    with pytest.raises(PrivacyError, match="no client contributes twice"):
        pool.tree_step("t", own_row)


def test_dp_sgd_encode_that_mixes_examples_is_refused_before_training():
    import torch

    clients = {f"s{i}": [{"text": "x", "label": float(i % 2)}] for i in range(16)}
    pool = ClientPool(clients, ledger=PrivacyLedger(), seed=0, unit="sample")
    model = torch.nn.Linear(1, 1)
    before = model.weight.detach().clone()

    def mixed_encode(records):
        y = torch.tensor([[r["label"]] for r in records]).mean().repeat(len(records), 1)
        return {"x": torch.ones(len(records), 1), "y": y}

    def loss_fn(m, batch):
        return torch.nn.functional.mse_loss(m(batch["x"]), batch["y"])

    options = {"noise_multiplier": 1.0, "clip_norm": 1.0, "batch_size": 4, "steps": 2, "lr": 0.1}
    with pytest.raises(PrivacyError, match=MIXED):
        pool.dp_sgd(model, mixed_encode, loss_fn, label="x", **options)
    assert torch.equal(model.weight.detach(), before) and pool.ledger.releases == []


def test_honest_functions_pass_and_randomness_is_seeded_per_client():
    import torch

    def randomised(client, payload):
        draws = [np.random.rand(), random.random(), torch.rand(1).item()]
        return np.array([*draws, len(client.texts[0])])

    def shared_projection(batch, payload):  # one draw per call, the same for every row
        return own_rows(batch, payload) * np.random.rand(2)

    sums = []
    for _ in range(2):
        pool = make_pool(seed=7)
        sums.append(release(pool, randomised, dim=4).noisy_sum)
        release(pool, own_rows, batched=True)
        release(pool, shared_projection, batched=True)
        assert len(pool.ledger.releases) == 3
    np.testing.assert_array_equal(sums[0], sums[1])

    # each client draws its own numbers (the seed includes the client)
    nonprivate = make_pool(allow_nonprivate=True)
    rows = []
    nonprivate.aggregate(
        lambda c, p: rows.append(randomised(c, p)) or rows[-1],
        dim=4,
        clip_norm=1e9,
        noise_multiplier=0.0,
        label="n",
    )
    assert len({tuple(r[:3]) for r in rows}) == len(rows)


def test_client_calls_leave_the_servers_rngs_alone():
    import torch

    def draws():
        return random.random(), float(np.random.rand()), torch.rand(1).item()

    def reseed():
        random.seed(1)
        np.random.seed(1)
        torch.manual_seed(1)

    def randomised(client, payload):
        return np.array([np.random.rand(), random.random(), torch.rand(1).item()])

    reseed()
    expected = draws()
    reseed()
    release(make_pool(), randomised, dim=3)
    assert draws() == expected


def test_non_private_releases_are_not_checked():
    pool = make_pool(allow_nonprivate=True)
    release(pool, mean_of_batch, noise_multiplier=0.0, batched=True)
    assert pool.ledger.releases[0].mechanism == "nonprivate"


def test_client_function_must_be_picklable():
    import threading

    lock = threading.Lock()
    with pytest.raises(PrivacyError, match="must be picklable"):
        release(make_pool(), lambda c, p: lock and own_row(c, p))


class Zero(float):
    """A noise multiplier that reads as 4.3 and scales the noise to nothing."""

    def __mul__(self, other):
        return 0.0

    __rmul__ = __mul__


class Truthy:
    def __init__(self):
        self.calls = 0

    def __bool__(self):
        self.calls += 1
        return self.calls == 1


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("noise_multiplier", Zero(4.3)),
        ("clip_norm", Zero(1.0)),
        ("sample_rate", Zero(1.0)),
        ("noise_multiplier", True),
        ("noise_multiplier", np.array(1.0)),
        ("dim", 2.0),
        ("dim", np.bool_(True)),
        ("batched", Truthy()),
        ("batched", 1),
    ],
)
def test_numeric_arguments_must_be_plain_numbers(option, value):
    pool = make_pool()
    with pytest.raises(PrivacyError, match=option):
        release(pool, own_row, **{option: value})
    assert pool.ledger.releases == []


def test_numpy_scalars_are_plain_numbers():
    pool = make_pool()
    release(pool, own_row, dim=np.int64(2), noise_multiplier=np.float32(1.5))
    assert type(pool.ledger.releases[0].noise_multiplier) is float
    assert plain_number("x", np.uint8(3), integer=True) == 3
    with pytest.raises(PrivacyError, match="x must be an int"):
        plain_number("x", 3.0, integer=True)
    options = {"noise_multiplier": 1.0, "clip_norm": 1.0, "batch_size": 2, "lr": 0.1}
    with pytest.raises(PrivacyError, match="steps must be an int"):
        pool.dp_sgd(None, None, None, steps=Zero(2), label="x", **options)
    with pytest.raises(PrivacyError, match="cohort_size must be an int"):
        pool.open_tree("t", dim=2, clip_norm=1.0, noise_multiplier=1.0, cohort_size=2.0)


def test_release_counter_cannot_be_rewound():
    pool = make_pool()
    saved = pool.state_dict()
    first = release(pool, own_row)
    with pytest.raises(PrivacyError, match="fresh pool"):
        pool.load_state_dict(saved)  # would draw the first release's noise again
    second = release(pool, own_row)
    assert not np.allclose(first.noisy_sum, second.noisy_sum)

    fresh = make_pool()
    fresh.load_state_dict(pool.state_dict())  # resume: a fresh pool, once
    with pytest.raises(PrivacyError, match="fresh pool"):
        fresh.load_state_dict(saved)
    after_resume = [release(p, own_row).noisy_sum for p in (pool, fresh)]
    np.testing.assert_array_equal(*after_resume)


def test_a_jobs_arrays_travel_out_of_band_as_writable_views_of_its_blob():
    """The recomputation children unpickle a job without copying its arrays: they are views
    of the blob, writable when it is a bytearray (like the pool's own payload)."""
    from benchmark.protocol.jobs import load_job, snapshot

    payload = {"table": np.arange(4096, dtype=np.float32).reshape(64, 64), "name": "t"}
    blob = bytearray(snapshot(own_row, payload))
    fn, loaded = load_job(blob)
    assert fn.__name__ == "own_row" and loaded["name"] == "t"
    np.testing.assert_array_equal(loaded["table"], payload["table"])
    base = np.frombuffer(blob, dtype=np.uint8)
    assert np.shares_memory(loaded["table"], base)
    assert (loaded["table"].ctypes.data - base.ctypes.data) % 64 == 0  # aligned parts
    loaded["table"][0, 0] = -1.0  # writable, and only the blob changes
    assert payload["table"][0, 0] == 0.0
    for malformed in (blob[:-1], blob[:3]):
        with pytest.raises(ValueError, match="malformed job"):
            load_job(malformed)


def test_a_faint_copy_is_measured_against_a_laplace_sums_own_bound():
    """Rows of norm ~1e-5 summed under an L1 bound of 1e-3, each carrying client 0's sign
    pattern at L2 size 2e-6: rows differ from their recomputation by at most 4e-6, within
    1e-5 of a floor of 1, yet the copy is coherent across every row, n times over in the
    sum. Measured against the release's own bound, the rows are refused."""

    def small_rows_with_faint_signs(batch, payload):
        period = 2 + batch.clients[0].labels[0]
        signs = np.where(np.arange(100) % period == 0, 1.0, -1.0) / 10  # unit L2
        own = 1e-6 * np.array([[c.labels[0] + 1.0] for c in batch.clients]) * np.ones(100)
        return own + 2e-6 * signs

    pool = make_pool()
    with pytest.raises(PrivacyError, match=MIXED):
        pool.laplace_aggregate(
            small_rows_with_faint_signs, None, dim=100, l1_bound=1e-3, epsilon=1.0, label="l",
            batched=True,
        )  # fmt: skip
    assert pool.ledger.releases == []
