"""``oracle``: the calibration control — real private texts, as many as a synthetic release.

What it answers: how much of the public → non-private gap could a *perfect* text release
of the synthetic methods' size close under the same downstream protocol? A synthetic
method cannot beat real private texts of the same count in expectation, so the oracle is
the ceiling of the text-release track at that size, and a benchmark whose oracle does not
move off the public start cannot rank text releases at all (issue "A benchmark that can
rank"). It is a **control**, not a method: it has no privacy (ε = ∞, a recorded
non-private release through ``ctx.pool.centralized``), and leaderboards mark it and never
rank it.

The draw: ``num_texts`` training texts uniformly without replacement over all train
texts (every sample of every train client, i.e. the split's 64-token spans), seeded by
the spec seed, made inside the client-side function — the server only ever holds the
drawn texts. With fewer train texts than ``num_texts`` all are released.

``num_texts`` per profile = the synthetic release size of the text methods on that
profile: ``cpu`` 1,000 (the ``cpu`` configs' PE / PrE-Text / POPri final sets; the
``bench`` suite sets 2,000 for every text release, the oracle's too), ``paper`` 2,048
(paper 004 App. D.2's N_syn), ``tiny`` 16.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from benchmark.api import Artifact, ClientData, Method, MethodContext
from methods.bounds import REFERENCE_UNITS


class Oracle(Method):
    """ε = ∞ control: ``num_texts`` real private training texts, drawn uniformly."""

    name = "oracle"
    role = "control"
    artifact_kind = "texts"
    privacy_units = REFERENCE_UNITS
    configs = {
        "tiny": {"num_texts": 16},
        "cpu": {"num_texts": 1000},
        "paper": {"num_texts": 2048},
    }

    def num_rounds(self) -> int:
        return 0

    def finish(self, ctx: MethodContext, state: Any) -> Artifact:
        rng = ctx.rng(0)
        count = self.config["num_texts"]

        def draw(clients: list[ClientData]) -> list[str]:
            texts = [t for client in clients for t in client.texts]
            keep = rng.choice(len(texts), size=min(count, len(texts)), replace=False)
            return [texts[i] for i in np.sort(keep)]

        texts = ctx.pool.centralized(draw, label=f"{self.name}/real-texts")
        return Artifact(kind="texts", texts=texts)
