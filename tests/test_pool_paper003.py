"""Paper 003's harness mechanisms: pure-ε releases, DP-PCA, partitions, per-part DP-SGD."""

import math

import numpy as np
import pytest

from benchmark.federation.dp_pca import sample_bingham, top_eigenvectors
from benchmark.federation.pool import ClientPool
from benchmark.privacy.accountants import epsilon, epsilon_from_ledger, noise_multiplier_for
from benchmark.privacy.errors import PrivacyError
from benchmark.privacy.ledger import (
    EXPONENTIAL,
    LAPLACE,
    NONPRIVATE,
    SUBSAMPLED_GAUSSIAN,
    UNCHARGED,
    PrivacyLedger,
    Release,
)

MIXED = "depends on other clients or on state"


def make_pool(vectors, **options):
    """One unit per row of ``vectors``; client code reads its row from its record."""
    clients = {
        f"u{i:03d}": [{"text": f"unit {i}", "x": list(map(float, v))}]
        for i, v in enumerate(vectors)
    }
    return ClientPool(clients, ledger=PrivacyLedger(), seed=0, unit="sample", **options)


def own_vector(client, payload):
    return np.array(client.records[0]["x"])


def sign_part(client, payload):
    """Part 0 when the first coordinate is negative, else part 1."""
    return np.array([float(client.records[0]["x"][0] >= 0)])


def test_laplace_sum_clips_each_unit_to_its_l1_bound():
    pool = make_pool([[1.0, 0.0], [0.0, 100.0], [3.0, 4.0]], allow_nonprivate=True)
    exact = pool.laplace_aggregate(own_vector, dim=2, l1_bound=1.0, epsilon=math.inf, label="s")
    # rows scaled to L1 norm <= 1: (1, 0), (0, 1), (3/7, 4/7)
    np.testing.assert_allclose(exact, [1 + 3 / 7, 1 + 4 / 7])
    assert pool.ledger.releases[0].mechanism == NONPRIVATE


def test_laplace_release_is_charged_its_pure_epsilon():
    pool = make_pool(np.zeros((4, 2000)))
    noisy = pool.laplace_aggregate(own_vector, dim=2000, l1_bound=2.0, epsilon=0.5, label="s")
    # Laplace of scale b = 2 / 0.5 has std b·√2
    assert noisy.std() == pytest.approx(4 * math.sqrt(2), rel=0.1)
    (release,) = pool.ledger.releases
    assert (release.mechanism, release.epsilon, release.sensitivity) == (LAPLACE, 0.5, 2.0)
    assert epsilon_from_ledger(pool.ledger.releases, 1e-5, "prv") == pytest.approx(0.5)
    with pytest.raises(PrivacyError, match="only allowed in a non-private run"):
        pool.laplace_aggregate(own_vector, dim=2000, l1_bound=2.0, epsilon=math.inf, label="s")
    with pytest.raises(PrivacyError, match="bound in"):  # a sum that could overflow
        pool.laplace_aggregate(own_vector, dim=2000, l1_bound=1e300, epsilon=0.5, label="s")


def test_bingham_sampler_draws_its_density():
    # on the circle, density ∝ exp(k cos²θ): compare E[sin²θ] with numerical integration
    rng = np.random.default_rng(0)
    samples = np.array([sample_bingham(np.array([3.0, 0.0]), rng) for _ in range(20_000)])
    theta = np.linspace(0, 2 * np.pi, 100_000, endpoint=False)
    weight = np.exp(3.0 * np.cos(theta) ** 2)
    expected = (weight * np.sin(theta) ** 2).sum() / weight.sum()
    assert np.mean(samples[:, 1] ** 2) == pytest.approx(expected, abs=0.01)  # SE ≈ 0.002


def test_dp_pca_finds_the_dominant_direction_only_with_budget():
    rng = np.random.default_rng(1)
    rows = rng.standard_normal((400, 10)) * 0.1
    rows[:, 3] += rng.choice([-1.0, 1.0], size=400)  # the top direction is e_3
    exact = top_eigenvectors(rows.T @ rows, 2, math.inf, rng)
    assert abs(exact[3, 0]) == pytest.approx(1.0, abs=1e-2)
    sharp = top_eigenvectors(rows.T @ rows, 2, 200.0, rng)
    np.testing.assert_allclose(sharp.T @ sharp, np.eye(2), atol=1e-12)
    assert abs(sharp[3, 0]) > 0.95
    vague = [abs(top_eigenvectors(rows.T @ rows, 1, 1e-3, rng)[3, 0]) for _ in range(200)]
    assert np.mean(vague) < 0.5  # about a uniform direction's |u_3| (≈ 0.25 in 10-d)


def test_dp_pca_release_is_recorded_as_the_exponential_mechanism():
    pool = make_pool(np.eye(5)[[0, 0, 0, 1, 2]] * 3.0)
    basis = pool.dp_pca(own_vector, dim=5, components=2, epsilon=0.25, label="pca")
    assert basis.shape == (5, 2)
    (release,) = pool.ledger.releases
    assert (release.mechanism, release.epsilon, release.sensitivity) == (EXPONENTIAL, 0.25, 1.0)
    with pytest.raises(PrivacyError, match="components must be in"):
        pool.dp_pca(own_vector, dim=5, components=6, epsilon=0.25, label="pca")


def test_noisy_part_sizes_are_charged_in_the_ledger():
    pool = make_pool([[-1.0], [-2.0], [3.0], [4.0], [5.0]])
    pool.define_partition("clusters", sign_part, parts=2)
    counts = pool.part_sizes("clusters", epsilon=0.1, label="histogram")
    assert counts.shape == (2,) and not np.allclose(counts, [2, 3])
    (release,) = pool.ledger.releases
    assert (release.mechanism, release.epsilon, release.sensitivity) == (LAPLACE, 0.1, 1.0)
    with pytest.raises(PrivacyError, match="only allowed in a non-private run"):
        pool.part_sizes("clusters", epsilon=math.inf, label="histogram")


def test_exact_part_sizes_only_uncharged_in_a_simulated_run():
    pool = make_pool([[-1.0], [-2.0], [3.0], [4.0], [5.0]], simulated=True)
    pool.define_partition("clusters", sign_part, parts=2)
    np.testing.assert_array_equal(pool.part_sizes("clusters", epsilon=math.inf, label="h"), [2, 3])
    (release,) = pool.ledger.releases
    assert release.mechanism == UNCHARGED
    assert epsilon_from_ledger(pool.ledger.releases, 1e-5) == 0.0


def test_a_partition_is_fixed_and_its_parts_depend_on_own_data_only():
    pool = make_pool([[-1.0], [2.0], [3.0]])
    pool.define_partition("clusters", sign_part, parts=2)
    with pytest.raises(PrivacyError, match="new, non-empty name"):
        pool.define_partition("clusters", sign_part, parts=2)

    def by_batch_mean(batch, payload):  # a unit's part moves with the others' data
        mean = np.mean([c.records[0]["x"][0] for c in batch.clients])
        return np.array([[float(c.records[0]["x"][0] >= mean)] for c in batch.clients])

    with pytest.raises(PrivacyError, match=MIXED):
        pool.define_partition("mixed", by_batch_mean, parts=2, batched=True)

    def off_the_grid_if_a_negative(batch, payload):  # 1 + 5e-6 is "no part", 1 is part 1
        faint = 5e-6 * any(c.records[0]["x"][0] < 0 for c in batch.clients)
        return np.array([[float(c.records[0]["x"][0] >= 0) + faint] for c in batch.clients])

    with pytest.raises(PrivacyError, match=MIXED):  # within any float tolerance: compared exactly
        pool.define_partition("faint", off_the_grid_if_a_negative, parts=2, batched=True)


def logistic_run(vectors, part):
    pool = make_pool(vectors)
    pool.define_partition("clusters", sign_part, parts=2)
    options = {"noise_multiplier": 1.0, "clip_norm": 1.0, "sample_rate": 0.5, "steps": 20}
    return pool, pool.dp_logistic_sgd(
        own_vector,
        dim=2,
        init=[0.0, 0.0],
        lr=0.1,
        expected_batch=2.0,
        label="reward",
        partition="clusters",
        part=part,
        **options,
    )


def test_per_part_dp_sgd_ignores_other_parts_and_records_its_part():
    base = [[-1.0, 0.5], [-2.0, 0.1], [3.0, 1.0], [4.0, -1.0]]
    moved = [*base[:2], [9.0, -5.0], base[3]]  # a member of part 1 changes
    pool, theta = logistic_run(base, part=0)
    np.testing.assert_array_equal(theta, logistic_run(moved, part=0)[1])
    assert not np.array_equal(logistic_run(base, part=1)[1], logistic_run(moved, part=1)[1])
    (release,) = pool.ledger.releases
    assert (release.mechanism, release.partition, release.part) == (
        SUBSAMPLED_GAUSSIAN,
        "clusters",
        0,
    )
    assert (release.sample_rate, release.count, release.sampling) == (0.5, 20, "poisson")


def test_nonprivate_logistic_sgd_learns_the_preference_direction():
    rng = np.random.default_rng(2)
    rows = rng.standard_normal((300, 3)) + np.array([1.0, 0.0, 0.0])
    pool = make_pool(rows, allow_nonprivate=True)
    theta = pool.dp_logistic_sgd(
        own_vector,
        dim=3,
        init=[0.0, 0.0, 0.0],
        noise_multiplier=0.0,
        clip_norm=1.0,
        sample_rate=0.2,
        steps=200,
        lr=0.1,
        expected_batch=60.0,
        label="reward",
    )
    assert theta[0] > 0.5 and abs(theta[1]) < 0.3 and abs(theta[2]) < 0.3
    assert pool.ledger.releases[0].mechanism == NONPRIVATE


def part_release(part, sample_rate, steps, sigma=0.8):
    return Release(
        SUBSAMPLED_GAUSSIAN,
        sigma,
        1.0,
        sample_rate,
        steps,
        "reward",
        sampling="poisson",
        partition="clusters",
        part=part,
    )


def test_parts_compose_in_parallel_and_pure_parts_add():
    delta = 1e-5
    parts = [part_release(k, 4 / m, m) for k, m in enumerate((1574, 2000, 3000))]
    worst = epsilon(0.8, 4 / 1574, 1574, delta, "prv")
    pure = [
        Release(LAPLACE, 4.0, 1.0, 1.0, 1, "hist", epsilon=0.25),
        Release(EXPONENTIAL, 0.0, 1.0, 1.0, 1, "pca", epsilon=0.5),
    ]
    total = epsilon_from_ledger(parts + pure, delta, "prv")
    assert total == pytest.approx(0.75 + worst, rel=1e-6)  # the smallest part, not the sum
    assert worst < total < 0.75 + 3 * worst
    other = Release(
        SUBSAMPLED_GAUSSIAN, 0.8, 1.0, 0.5, 1, "x", sampling="poisson", partition="other", part=0
    )
    with pytest.raises(ValueError, match="more than one partition"):
        epsilon_from_ledger([*parts, other], delta, "prv")


def test_noise_sized_at_the_minimum_allowed_part_covers_every_kept_part():
    # paper 003: parts smaller than n_min = ⌊n/(K+4)⌋ are discarded, so σ solved at n_min
    # (q = 4/n_min, T = 4 epochs of it) bounds every kept part (more units: lower q·√T)
    n, k, delta = 14_167, 5, 1 / 14_167
    n_min = n // (k + 4)
    sigma = noise_multiplier_for(3.0, delta, 4 / n_min, n_min, "prv")
    kept = [part_release(i, 4 / m, m, sigma) for i, m in enumerate((n_min, 2 * n_min, 5000))]
    assert epsilon_from_ledger(kept, delta, "prv") <= 3.0
    assert epsilon_from_ledger(kept[1:], delta, "prv") < epsilon_from_ledger(kept[:1], delta, "prv")


def test_release_fields_are_checked():
    with pytest.raises(ValueError, match="pure mechanisms"):
        Release(SUBSAMPLED_GAUSSIAN, 1.0, 1.0, 1.0, 1, "x", epsilon=0.5)
    with pytest.raises(ValueError, match="finite epsilon"):
        Release(LAPLACE, 1.0, 1.0, 1.0, 1, "x", epsilon=math.inf)
    with pytest.raises(ValueError, match="no amplification"):
        Release(LAPLACE, 1.0, 1.0, 0.5, 1, "x", sampling="poisson", epsilon=1.0)
    with pytest.raises(ValueError, match="both its partition and its part"):
        Release(SUBSAMPLED_GAUSSIAN, 1.0, 1.0, 1.0, 1, "x", partition="clusters")


def test_pure_and_partitioned_entries_round_trip_and_old_entries_are_unchanged():
    plain = Release(SUBSAMPLED_GAUSSIAN, 1.0, 1.0, 1.0, 1, "x")
    ledger = PrivacyLedger(
        [plain, part_release(2, 0.1, 3), Release(LAPLACE, 2.0, 1.0, 1.0, 1, "h", epsilon=0.5)]
    )
    entries = ledger.to_json()
    assert set(entries[0]) == {
        "mechanism",
        "noise_multiplier",
        "sensitivity",
        "sample_rate",
        "count",
        "label",
        "sampling",
        "unit",
        "dim",
    }
    assert (entries[1]["partition"], entries[1]["part"], entries[2]["epsilon"]) == (
        "clusters",
        2,
        0.5,
    )
    assert PrivacyLedger.from_json(entries).releases == ledger.releases
