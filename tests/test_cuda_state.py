"""The independence check and seeded randomness whatever CUDA's state in each process.

No GPU here: CUDA's state is faked on ``torch.cuda``. In a GPU run the coordinator has CUDA
initialised (its models are on the GPU) while the recomputing processes start without it;
neither may change what a client's row is, nor make an honest release fail the check.
"""

import numpy as np
import pytest
import torch

from benchmark.federation.clients import seeded_rngs
from benchmark.federation.pool import ClientPool
from benchmark.privacy.ledger import PrivacyLedger
from benchmark.profiles.seeding import seeded


def torch_row(client, payload):
    """An honest client function that computes its row with torch."""
    return torch.tensor([float(len(client.texts[0])), float(client.labels[0])]).numpy()


def test_independence_check_passes_with_cuda_initialised_in_the_pools_process(monkeypatch):
    clients = {f"c{i}": [{"text": "x" * (i + 1), "label": i}] for i in range(4)}
    pool = ClientPool(clients, ledger=PrivacyLedger(), seed=0)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)  # as on a GPU coordinator
    pool.aggregate(torch_row, None, dim=2, clip_norm=100.0, noise_multiplier=1.0, label="r")
    assert [r.label for r in pool.ledger.releases] == ["r"]


def test_seeded_does_not_initialise_cuda(monkeypatch):
    def initialise():
        raise AssertionError("seeded() initialised CUDA")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.cuda, "current_device", initialise)
    monkeypatch.setattr(torch.cuda, "_lazy_init", initialise)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)  # fork_rng() would save its
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device=0: initialise())  # RNG
    with seeded(3):
        first = torch.rand(2)
    with seeded(3):
        assert torch.equal(torch.rand(2), first)


class FakeCuda:
    """CUDA as torch.random.fork_rng and the pool's seeding see it: one device, its
    generator's seed, initialised on demand."""

    def __init__(self, monkeypatch, initialised):
        self.initialised, self.seed = initialised, None
        fakes = {
            "is_available": lambda: True,
            "is_initialized": lambda: self.initialised,
            "init": self.init,
            "device_count": lambda: 1,
            "get_rng_state": lambda device=0: torch.tensor([self.seed or 0]),
            "set_rng_state": lambda state, device=0: None,
            "manual_seed_all": self.manual_seed_all,
        }
        for name, fake in fakes.items():
            monkeypatch.setattr(torch.cuda, name, fake)

    def init(self):
        self.initialised = True

    def manual_seed_all(self, seed):
        assert self.initialised, "a lazy seed would outlive the call"
        self.seed = seed


@pytest.mark.parametrize("initialised", [False, True])
def test_client_calls_see_cuda_seeded_whether_or_not_it_was_initialised(monkeypatch, initialised):
    """The first call in a fresh process (CUDA not yet initialised) and a later one see
    the same CUDA seed: a row recomputed alone matches the client worker's."""
    cuda = FakeCuda(monkeypatch, initialised)
    with seeded_rngs(17):
        assert cuda.initialised and cuda.seed == 17
    state = np.random.get_state()[1][:4].copy()
    with seeded_rngs(5):
        assert cuda.seed == 5
    assert np.array_equal(np.random.get_state()[1][:4], state)  # the caller's state is back
