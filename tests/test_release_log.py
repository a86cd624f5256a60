"""The release log and the budget-first check (issue 33, items 4 and 8), at the pool: a
delivered release is replayed after a crash, never redrawn; a call that differs from the
delivered one is refused; a release over budget is refused before any client code runs."""

import numpy as np
import pytest

from benchmark.federation.pool import ClientPool
from benchmark.federation.release_log import ReleaseLog
from benchmark.privacy.budget import Budget
from benchmark.privacy.errors import BudgetExceededError, PrivacyError
from benchmark.privacy.ledger import PrivacyLedger

CALLS: list[str] = []  # client calls made in this process (in-process clients)
N = 6


def units():
    return {f"c{i}": [{"text": "x" * (3 + 2 * i)}] for i in range(N)}


def make_pool(log_dir=None, budget=None, checks=0, opened=True):
    pool = ClientPool(
        units(),
        ledger=PrivacyLedger(guard=budget.check if budget else None),
        seed=7,
        independence_checks=checks,
        release_log=ReleaseLog(log_dir) if log_dir else None,
    )
    if opened:
        pool.open_release_log()
    return pool


def length(client, payload):
    CALLS.append("length")
    return np.array([len(client.texts[0]) / 100.0, 1.0])


def zeros(client, payload):
    CALLS.append("zeros")
    return np.zeros(2)


def release(pool, fn, label="r", sigma=1.0):
    return pool.aggregate(fn, dim=2, clip_norm=1.0, noise_multiplier=sigma, label=label)


EXACT = np.array([sum(3 + 2 * i for i in range(N)) / 100.0, N])  # Σ length rows (unclipped)


def test_a_resumed_pool_replays_the_delivered_value_and_never_redraws_its_noise(tmp_path):
    first = release(make_pool(tmp_path), length).noisy_sum  # delivered; then the run dies
    CALLS.clear()
    resumed = make_pool(tmp_path)
    assert len(resumed.ledger.releases) == 1  # charged on opening, asked again or not
    again = release(resumed, length).noisy_sum
    assert np.array_equal(again, first) and CALLS == []  # the logged value, nothing computed
    assert len(resumed.ledger.releases) == 1 and resumed.replays_pending() == 0
    noise = release(resumed, zeros, label="next").noisy_sum  # a zero sum: its noise alone
    assert CALLS == ["zeros"] * N
    assert not np.allclose(first - noise, EXACT)  # fresh noise: nothing cancels
    assert len(resumed.ledger.releases) == 2


def test_another_call_at_a_delivered_position_is_refused(tmp_path):
    """The resumed method is not the run that was interrupted: another label, parameter or
    operation at a delivered position is refused."""
    release(make_pool(tmp_path), length)
    for attempt in (
        lambda p: release(p, length, label="other"),
        lambda p: release(p, length, sigma=2.0),
        lambda p: p.laplace_aggregate(length, dim=2, l1_bound=1.0, epsilon=1.0, label="r"),
    ):
        CALLS.clear()
        with pytest.raises(PrivacyError, match="must repeat its delivered calls in order"):
            attempt(make_pool(tmp_path))
        assert CALLS == []


def test_another_job_at_a_delivered_position_gets_the_logged_value_and_runs_nowhere(tmp_path):
    """The crash-and-subtract attack: the same noise for a zero sum would give the exact sum
    away. The zero sum is never computed; the method gets back only what it saw."""
    first = release(make_pool(tmp_path), length).noisy_sum
    CALLS.clear()
    again = release(make_pool(tmp_path), zeros).noisy_sum
    assert np.array_equal(again, first) and CALLS == []


def test_an_uninterrupted_pool_and_a_resumed_one_release_the_same(tmp_path):
    """With the same seed, a pool killed after two tree steps and resumed gives what one
    that never stopped gives: replayed steps restore the tree (its exact prefix), the
    third step draws the noise it would have drawn."""

    def steps(pool, count):
        if not pool._trees:  # noqa: SLF001  (the test looks inside, the method cannot)
            pool.open_tree("t", dim=2, clip_norm=1.0, noise_multiplier=1.0, cohort_size=2)
        return [pool.tree_step("t", length) for _ in range(count)]

    uninterrupted = make_pool()
    straight = steps(uninterrupted, 3)
    killed = steps(make_pool(tmp_path), 2)
    resumed = make_pool(tmp_path)
    assert resumed.replays_pending() == 3  # the tree's opening and its two steps
    CALLS.clear()
    again = steps(resumed, 3)
    assert CALLS == ["length"] * 2  # only the third step ran client code
    for got, want in zip(again, [*killed, straight[2]], strict=True):
        np.testing.assert_array_equal(got, want)
    assert resumed.ledger.releases == uninterrupted.ledger.releases


def test_a_checkpoint_prunes_the_log_and_a_resume_past_it_replays_nothing(tmp_path):
    pool = make_pool(tmp_path)
    release(pool, length)
    state = pool.state_dict()  # the runner checkpoints, then prunes
    pool.prune_release_log()
    assert not list(tmp_path.iterdir())
    resumed = make_pool(tmp_path, opened=False)
    resumed.load_state_dict(state)
    assert resumed.open_release_log() == 0


def test_the_log_must_be_opened_before_a_call_and_only_once(tmp_path):
    pool = make_pool(tmp_path, opened=False)
    with pytest.raises(PrivacyError, match="opened before the first call"):
        release(pool, length)
    pool.open_release_log()
    with pytest.raises(PrivacyError, match="opened once"):
        pool.open_release_log()


BUDGET = Budget(epsilon=1.0, delta=1e-5, accountant="rdp")


@pytest.mark.parametrize(
    "over_budget",
    [
        lambda p: release(p, length, sigma=1e-3),
        lambda p: p.laplace_aggregate(length, dim=2, l1_bound=1.0, epsilon=5.0, label="l"),
        lambda p: p.dp_pca(length, dim=2, components=1, epsilon=5.0, label="pca"),
        lambda p: p.open_tree("t", dim=2, clip_norm=1.0, noise_multiplier=0.01, cohort_size=1),
    ],
    ids=["gaussian", "laplace", "dp_pca", "tree"],
)
def test_a_release_over_budget_is_refused_before_any_client_code_runs(tmp_path, over_budget):
    pool = make_pool(tmp_path, budget=BUDGET, checks=8)
    CALLS.clear()
    with pytest.raises(BudgetExceededError, match="allows epsilon=1"):
        over_budget(pool)
    assert CALLS == [] and pool.ledger.releases == [] and not list(tmp_path.iterdir())
    release(pool, length, sigma=20.0)  # an affordable release goes through, at index 0
    assert CALLS == ["length"] * N and len(pool.ledger.releases) == 1
