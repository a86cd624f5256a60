"""DP-SGD (opacus) on the pool's private examples, for sample-level and central-DP runs.

The method supplies the model, a client-side ``encode`` (records → fixed-shape tensors)
and a ``loss_fn``; the harness builds the Poisson-sampled loader, clips per example, adds
the noise and records the whole training as one ledger entry with the sampling rate
opacus actually used.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

Encode = Callable[[list[dict[str, Any]]], dict[str, torch.Tensor]]
LossFn = Callable[[torch.nn.Module, dict[str, torch.Tensor]], torch.Tensor]


def run_dp_sgd(
    model: torch.nn.Module,
    examples: list[dict[str, Any]],
    encode: Encode,
    loss_fn: LossFn,
    *,
    noise_multiplier: float,
    clip_norm: float,
    batch_size: int,
    steps: int,
    lr: float,
    seed: int,
) -> tuple[torch.nn.Module, float]:
    """Train ``model`` for ``steps`` DP-SGD steps; returns it and the Poisson sampling rate."""
    from opacus import PrivacyEngine

    tensors = encode(examples)
    names = sorted(tensors)
    dataset = TensorDataset(*(tensors[n] for n in names))
    loader = DataLoader(
        dataset, batch_size=batch_size, generator=torch.Generator().manual_seed(seed)
    )
    device = next(model.parameters()).device  # opacus draws the noise where the grads are
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    engine = PrivacyEngine(accountant="rdp")
    private_model, private_optimizer, private_loader = engine.make_private(
        module=model,
        optimizer=optimizer,
        data_loader=loader,
        noise_multiplier=noise_multiplier,
        max_grad_norm=clip_norm,
        poisson_sampling=True,
        noise_generator=torch.Generator(device=device).manual_seed(seed + 1),
    )
    sample_rate = float(private_loader.sample_rate)
    done = 0
    private_model.train()
    while done < steps:
        for batch in private_loader:
            if done >= steps:
                break
            private_optimizer.zero_grad()
            on_device = [t.to(device) for t in batch]
            loss = loss_fn(private_model, dict(zip(names, on_device, strict=True)))
            loss.backward()
            private_optimizer.step()
            done += 1
    return private_model._module if hasattr(
        private_model, "_module"
    ) else private_model, sample_rate
