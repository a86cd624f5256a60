"""Shared test support for the adapters (public_only, nonprivate, dp_fedavg, dp_ftrl,
dpprefsyn, ...): small in-memory federated splits (texts; preference tuples), a method
context on the tiny profile, and a driver that runs a method the way the runner does
(torch reseeded per round)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from benchmark.data import FederatedSplit
from benchmark.federation.pool import ClientPool
from benchmark.federation.quarantine import Diagnostics
from benchmark.method import Method, MethodContext
from benchmark.privacy.ledger import PrivacyLedger
from benchmark.profiles import get_profile
from benchmark.runner import privacy_units
from benchmark.spec import PrivacySpec

TOPICS = ("river", "garden", "market", "library", "train", "kitchen", "harbour", "forest")
PUBLIC = (
    "The cat sat on the mat and watched the rain fall on the garden.",
    "A man is eating food at a small table near the window.",
    "She opened the door, looked outside, and decided to stay at home.",
    "The train to the city leaves at 7:15 and arrives at 8:02.",
    "The weather today is sunny with a light wind from the west.",
    "They walked along the river until the sun went down behind the hills.",
)


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Tiny models train several times faster on one thread, above all on a shared machine."""
    previous = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def client_texts(i: int, n: int) -> list[str]:
    topic = TOPICS[i % len(TOPICS)]
    return [f"In the {topic} the people of house {i} sing song number {j}." for j in range(n)]


def make_split(n_clients: int = 8, per_client: int = 3) -> FederatedSplit:
    train = [
        {"text": t, "client_id": f"c{i:02d}"}
        for i in range(n_clients)
        for t in client_texts(i, per_client)
    ]
    validation = [
        {"text": t, "client_id": f"v{i}"} for i in range(3) for t in client_texts(100 + i, 2)
    ]
    public = [{"text": t, "client_id": "public"} for t in PUBLIC * 3]
    return FederatedSplit(
        "toy", {"version": "v-test"}, {"train": train, "validation": validation, "public": public}
    )


PREFERENCE_TOPICS = ("river", "garden", "market", "library", "harbour", "forest")


def prompt(topic: str) -> str:
    return f"\n\nHuman: what do you think of the {topic}?\n\nAssistant: "


def make_preference_split(n: int = 120) -> FederatedSplit:
    """Two kinds of annotators: one prefers warm, long answers, the other short, dry ones."""
    train = []
    for i in range(n):
        topic = PREFERENCE_TOPICS[i % len(PREFERENCE_TOPICS)]
        warm = f"I really love the {topic}, it is lovely and calm and full of wonderful light."
        dry = f"The {topic} is fine."
        chosen, rejected = (warm, dry) if i % 3 else (dry, warm)
        train.append(
            {
                "text": prompt(topic) + chosen,
                "client_id": f"s{i:03d}",
                "prompt": prompt(topic),
                "chosen": chosen,
                "rejected": rejected,
            }
        )
    public = [
        {"text": prompt(t), "client_id": "public", "prompt": prompt(t)} for t in PREFERENCE_TOPICS
    ]
    return FederatedSplit(
        "prefs", {"version": "v-test"}, {"train": train, "validation": [], "public": public}
    )


def make_context(
    tmp_path: Path,
    *,
    epsilon: float,
    delta: float = 1e-5,
    split: FederatedSplit | None = None,
    seed: int = 0,
    pool_seed: int | None = None,
    accountant: str = "rdp",
    unit: str = "user",
    guarantee: str = "formal",
) -> MethodContext:
    """A method context as the runner builds it; ``pool_seed`` varies only the harness noise."""
    split = split or make_split()
    pool = ClientPool(
        privacy_units(split, unit),
        ledger=PrivacyLedger(),
        seed=seed if pool_seed is None else pool_seed,
        unit=unit,
        allow_nonprivate=math.isinf(epsilon),
        simulated=guarantee == "simulated",
        preference_policy=lambda: get_profile("tiny").generator(),
    )
    return MethodContext(
        pool=pool,
        public=split.records("public"),
        validation=split.records("validation"),
        profile=get_profile("tiny"),
        privacy=PrivacySpec(
            epsilon=epsilon, delta=delta, unit=unit, accountant=accountant, guarantee=guarantee
        ),
        seed=seed,
        work_dir=tmp_path,
        diagnostics=Diagnostics(tmp_path),
    )


def seed_round(ctx: MethodContext, round_index: int) -> None:
    """The runner's per-round torch seeding."""
    torch.manual_seed(ctx.seed * 1_000_003 + round_index + 1)


def finish(method: Method, ctx: MethodContext, state: Any) -> Any:
    """``finish`` after the runner's seeding for the step after the last round."""
    seed_round(ctx, method.num_rounds())
    return method.finish(ctx, state)


def run_rounds(method: Method, ctx: MethodContext, state: Any = None, rounds=None) -> Any:
    """``setup`` (unless a state is given) and the rounds in ``rounds`` (default: all)."""
    if state is None:
        seed_round(ctx, -1)
        state = method.setup(ctx)
    for r in rounds if rounds is not None else range(method.num_rounds()):
        seed_round(ctx, r)
        state = method.round(ctx, state, r)
    return state


def load_params(model_dir: str) -> torch.Tensor:
    """Parameters of a released model, loaded the way the evaluator loads it."""
    from transformers import AutoModelForCausalLM

    from benchmark.training import flat_params

    return flat_params(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32))
