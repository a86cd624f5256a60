"""POPri client scoring: Algorithm 4 as one matrix product, clipped and noised by the pool."""

import numpy as np
import pytest

from benchmark.federation.clients import ClientBatch, ClientData, client_scope
from benchmark.federation.pool import ClientPool
from benchmark.privacy.ledger import PrivacyLedger
from benchmark.profiles.base import Embedder
from benchmark.profiles.embedders import HashedNgramEmbedder
from methods.popri_scoring import SimilarityScorer, preference_indices, standardize_rows

WORDS = ("river", "garden", "market", "stone", "harbour", "forest", "bread", "song")


class ScaledCountingEmbedder(Embedder):
    """Hashed n-grams scaled by text length (so rows are *not* unit length); counts calls."""

    def __init__(self) -> None:
        self.inner = HashedNgramEmbedder(dim=48)
        self.dim = self.inner.dim
        self.name = "scaled-" + self.inner.name
        self.calls = 0

    def embed(self, texts):
        self.calls += 1
        lengths = np.array([[1.0 + len(t) / 10.0] for t in texts], dtype=np.float32)
        return self.inner.embed(texts) * lengths


def client_texts(n_clients):
    """Clients with 1 to 4 texts each, on overlapping topics."""
    return {
        f"c{i:02d}": [
            f"the {WORDS[i % 8]} and the {WORDS[(i + j) % 8]} {j}" for j in range(1 + i % 4)
        ]
        for i in range(n_clients)
    }


def synthetic(embedder, n):
    texts = [f"a {WORDS[k % 8]} by the {WORDS[(3 * k) % 8]}" for k in range(n)]
    return embedder.embed(texts)


def loop_reference(embedder, texts_by_client, syn):
    """Algorithm 4 line 2 literally: a loop over clients, private and synthetic samples."""
    rows = []
    for texts in texts_by_client.values():
        private = embedder.embed(texts)
        rows.append(
            [
                np.mean([p @ s / (np.linalg.norm(p) * np.linalg.norm(s)) for p in private])
                for s in syn
            ]
        )
    return np.array(rows)


def pool_of(texts_by_client, seed=0, nonprivate=True):
    records = {cid: [{"text": t} for t in texts] for cid, texts in texts_by_client.items()}
    return ClientPool(records, ledger=PrivacyLedger(), seed=seed, allow_nonprivate=nonprivate)


def aggregate(pool, scorer, syn, sigma=0.0, sample_rate=1.0):
    return pool.aggregate(
        scorer,
        syn,
        dim=len(syn),
        clip_norm=1.0,
        noise_multiplier=sigma,
        sample_rate=sample_rate,
        label="scores",
        batched=True,
    ).noisy_sum


def test_batched_scores_equal_the_per_client_loop():
    embedder = ScaledCountingEmbedder()
    texts = client_texts(11)
    syn = synthetic(embedder, 7) * 3.0  # cosine similarity ignores the scale
    batch = ClientBatch([ClientData([{"text": t} for t in ts], {}) for ts in texts.values()])
    with client_scope():
        rows = SimilarityScorer(embedder)(batch, syn)
    assert rows.shape == (11, 7) and rows.dtype == np.float32
    np.testing.assert_allclose(rows, loop_reference(embedder, texts, syn), atol=1e-5)


def test_a_clients_row_depends_on_its_own_data_only():
    embedder = ScaledCountingEmbedder()
    texts = client_texts(6)
    syn = synthetic(embedder, 5)
    clients = [ClientData([{"text": t} for t in ts], {}) for ts in texts.values()]
    with client_scope():
        together = SimilarityScorer(embedder)(ClientBatch(clients), syn)
        alone = SimilarityScorer(embedder)(ClientBatch([ClientData(clients[3]._records, {})]), syn)
    # float32 rows: a batch of 6 and a batch of 1 may block the BLAS product differently, so
    # compare at float32 accumulation accuracy (a mixed-in client would move it by O(1)).
    np.testing.assert_allclose(together[3], alone[0], rtol=1e-5, atol=1e-6)


def test_pool_sum_is_the_clipped_loop_reference_and_the_memo_is_reused():
    embedder = ScaledCountingEmbedder()
    texts = client_texts(9)
    syn = synthetic(embedder, 30)
    reference = loop_reference(embedder, texts, syn)
    norms = np.linalg.norm(reference, axis=1)
    assert np.all(norms > 1.0)  # every client's vector is scaled down by the clipping
    expected = (reference / np.maximum(norms, 1.0)[:, None]).sum(axis=0)
    pool = pool_of(texts)
    scorer = SimilarityScorer(embedder)
    calls = embedder.calls
    np.testing.assert_allclose(aggregate(pool, scorer, syn), expected, atol=1e-5)
    assert embedder.calls == calls + 1  # all clients embedded in one batched call
    second = aggregate(pool, scorer, syn[:4])  # next round: the client-side memo is reused
    assert embedder.calls == calls + 1
    fresh = aggregate(pool_of(texts), SimilarityScorer(embedder), syn[:4])
    np.testing.assert_allclose(second, fresh, rtol=1e-5, atol=1e-6)  # float32 sums
    assert len(pool.ledger.releases) == 2


@pytest.mark.parametrize("n_synthetic", [2, 40])
def test_each_client_vector_is_clipped_to_norm_one(n_synthetic):
    embedder = ScaledCountingEmbedder()
    texts = {"only": ["the river and the garden", "the river and the stone"]}
    syn = synthetic(embedder, n_synthetic)
    row = loop_reference(embedder, texts, syn)[0]
    total = aggregate(pool_of(texts), SimilarityScorer(embedder), syn)
    if np.linalg.norm(row) > 1.0:
        assert np.linalg.norm(total) == pytest.approx(1.0, abs=1e-6)
        np.testing.assert_allclose(total, row / np.linalg.norm(row), atol=1e-6)
    else:  # Algorithm 4 divides by max(1, ||Scores||): short vectors pass unchanged
        np.testing.assert_allclose(total, row, atol=1e-6)
    assert (np.linalg.norm(row) > 1.0) == (n_synthetic == 40)


def test_noise_is_the_pools_and_depends_on_its_seed():
    embedder = ScaledCountingEmbedder()
    texts = client_texts(5)
    syn = synthetic(embedder, 6)
    exact = aggregate(pool_of(texts), SimilarityScorer(embedder), syn)
    noisy = [
        aggregate(pool_of(texts, seed=s, nonprivate=False), SimilarityScorer(embedder), syn, 2.0)
        for s in (0, 0, 1)
    ]
    np.testing.assert_array_equal(noisy[0], noisy[1])
    assert not np.allclose(noisy[0], noisy[2])
    spread = np.std(np.concatenate([n - exact for n in noisy[::2]]))
    assert 0.8 < spread < 3.5  # noise std = sigma * clip_norm = 2


def test_preference_indices_pick_rank_one_and_rank_l_per_prompt():
    scores = np.array([0.1, 0.9, 0.5, 0.3, 4.0, 3.0, 2.0, 1.0, 0.2, 0.2, 0.2, 0.2])
    chosen, rejected = preference_indices(scores, 3, 4, rejected_rank=3)
    np.testing.assert_array_equal(chosen, [1, 4, 8])  # ties keep generation order
    np.testing.assert_array_equal(rejected, [3, 6, 10])
    chosen, rejected = preference_indices(scores, 3, 4, rejected_rank=4)
    np.testing.assert_array_equal(rejected, [0, 7, 11])
    for bad in (1, 5):
        with pytest.raises(ValueError, match="rejected_rank"):
            preference_indices(scores, 3, 4, rejected_rank=bad)


def test_standardisation_z_scores_each_clients_row_before_the_pools_clipping():
    embedder = ScaledCountingEmbedder()
    texts = client_texts(5)
    syn = synthetic(embedder, 8)
    raw = loop_reference(embedder, texts, syn)
    z = (raw - raw.mean(axis=1, keepdims=True)) / raw.std(axis=1, keepdims=True)
    clients = [ClientData([{"text": t} for t in ts], {}) for ts in texts.values()]
    with client_scope():
        rows = SimilarityScorer(embedder, standardize=True)(ClientBatch(clients), syn)
    np.testing.assert_allclose(rows, z, rtol=1e-4, atol=1e-4)
    # each z-scored row has norm sqrt(K*J) > 1, so the pool scales every client to norm 1
    expected = (z / np.linalg.norm(z, axis=1, keepdims=True)).sum(axis=0)
    scorer = SimilarityScorer(embedder, standardize=True)
    np.testing.assert_allclose(aggregate(pool_of(texts), scorer, syn), expected, atol=1e-4)


def test_a_client_indifferent_to_every_sample_standardises_to_zeros():
    np.testing.assert_array_equal(standardize_rows(np.full((2, 5), 0.3)), np.zeros((2, 5)))
