"""Local DP-SGD on one client's samples: the harness's side of paper 001's Algorithm A.3.

In a ``client_sample`` run each strong client fine-tunes the generator on its own samples
with DP-SGD, and its model delta is then (ε, δ)-DP with respect to those samples. The
whole loop lives here, in harness code run by the pool's (trusted) process: the method
hands over a state dict and numbers, never code, so nothing it wrote can sit beside the
clipping and the noise. The model is the profile's conditional LM
(:meth:`benchmark.profiles.base.ModelProfile.conditional_lm`: GPT-2 in ``paper``,
SmolLM2-135M in ``cpu``), conditioned on a control-code prompt.

Per-sample gradients are computed one sample at a time (a backward pass per sample of the
Poisson batch): slower than vectorised per-sample gradients, but exact for any
architecture, with nothing to trust in how a batch is split.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from benchmark.control_codes import code_slots
from benchmark.data import LABEL, TEXT
from benchmark.privacy.errors import PrivacyError
from benchmark.training_precision import training_autocast

IGNORE = -100  # label id the LM loss skips (the prompt's tokens)


@dataclass(frozen=True)
class DPSGDSteps:
    """``steps`` DP-SGD steps at Poisson rate ``sample_rate``.

    The update is θ ← θ − lr · (Σ clip(g_i) + N(0, σ²C²)) / ``batch_size``, the mean over
    the expected batch size, as in paper 001's Alg. A.3 and opacus. ``batch_size`` is a
    public number the method sets (paper 001: 256), not q·n: the sample count n is private,
    and a divisor that depends on it would leave the Gaussian analysis. ``noise_multiplier``
    0 (the non-private bound) trains without clipping or noise.
    """

    noise_multiplier: float
    clip_norm: float
    sample_rate: float
    batch_size: float
    steps: int
    lr: float


@dataclass(frozen=True)
class LocalDPSGD(DPSGDSteps):
    """One client's local training (paper 001): the steps, and how its samples are
    conditioned (``prompt_template``) and cut (``max_length``)."""

    prompt_template: str = ""
    max_length: int = 64


def control_prompt(template: str, label: Any) -> str:
    """The control-code prompt of a sample: ``template`` with the code's slots
    (:func:`benchmark.control_codes.code_slots`: ``{label}``, ``{label_1}``, …) replaced by
    plain replacement, not ``str.format``, which would evaluate attribute lookups. Methods
    fill their generation prompts with this same function."""
    for slot, value in code_slots(str(label)).items():
        template = template.replace("{" + slot + "}", value)
    return template


def conditional_example(
    tokenizer: Any, prompt: str, text: str, max_length: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids of ``prompt + text + EOS`` and labels that score only the text: the loss is
    −log p(x | c), the prompt is the condition."""
    prompt_ids = tokenizer(prompt)["input_ids"]
    text_ids = tokenizer(text)["input_ids"] + [tokenizer.eos_token_id]
    ids = (prompt_ids + text_ids)[:max_length]
    labels = ([IGNORE] * len(prompt_ids) + text_ids)[:max_length]
    return torch.tensor(ids), torch.tensor(labels)


def plain_weights(weights: Any) -> dict[str, torch.Tensor]:
    """``weights`` as a dict of plain tensors: a tensor subclass could run its own code in
    the pool's process through ``__torch_function__``."""
    if type(weights) is not dict:
        raise PrivacyError("local DP-SGD needs the weights as a dict of tensors")
    for name, tensor in weights.items():
        if type(name) is not str or type(tensor) is not torch.Tensor:
            raise PrivacyError("local DP-SGD weights must map names to plain torch tensors")
    return weights


class LocalLMTrainer:
    """Runs :class:`LocalDPSGD` on the profile's conditional LM (built lazily: most runs
    never fine-tune locally)."""

    def __init__(self, conditional_lm: Callable[[], Any]) -> None:
        self._conditional_lm = conditional_lm

    def finetune(
        self,
        weights: dict[str, Any],
        records: list[dict[str, Any]],
        config: LocalDPSGD,
        seed: int,
    ) -> dict[str, torch.Tensor]:
        """The model delta of one client's local training from ``weights``."""
        lm = self._conditional_lm()
        model = lm.new_model(0)
        model.load_state_dict(weights, strict=True)
        examples = [
            conditional_example(
                lm.tokenizer,
                control_prompt(config.prompt_template, r.get(LABEL, "")),
                r[TEXT],
                config.max_length,
            )
            for r in records
        ]
        params = dict(model.named_parameters())
        start = {name: p.detach().clone() for name, p in params.items()}
        with torch.random.fork_rng():
            torch.manual_seed(seed % 2**63)
            train_locally(model, examples, config, np.random.default_rng(seed))
        return {name: (p.detach() - start[name]).cpu() for name, p in params.items()}


def lm_loss(model: torch.nn.Module, example: Any) -> torch.Tensor:
    """−log p(x | c) of one (ids, labels) example: the mean over its scored tokens."""
    ids, labels = example
    device = next(model.parameters()).device
    return model(input_ids=ids[None].to(device), labels=labels[None].to(device)).loss


def train_locally(
    model: torch.nn.Module,
    examples: list[Any],
    config: DPSGDSteps,
    rng: np.random.Generator,
    loss: Callable[[torch.nn.Module, Any], torch.Tensor] = lm_loss,
    adam: bool = False,
) -> None:
    """``config.steps`` DP-SGD steps of ``model`` on ``examples`` (in place): per example,
    the gradient of ``loss`` (harness code: :func:`lm_loss`, or paper 003's per-pair DPO
    loss) clipped to ``clip_norm``; their sum plus noise over ``batch_size`` is the step's
    gradient, applied by SGD, or by Adam when ``adam`` (DP-Adam: post-processing of the
    same noisy gradients). The parameters are the float32 master weights (a bf16 model is
    trained on a float32 copy: :func:`benchmark.preference_training.trainable_copy`); the
    forward pass runs under bf16 autocast on a GPU (:mod:`benchmark.training_precision`)."""
    params = [p for p in model.parameters() if p.requires_grad]
    private = config.noise_multiplier > 0
    device = params[0].device
    noise = torch.Generator(device=device).manual_seed(int(rng.integers(2**62)))
    optimiser = torch.optim.Adam(params, lr=config.lr) if adam else None
    model.train()
    for _ in range(config.steps):
        chosen = np.flatnonzero(rng.random(len(examples)) < config.sample_rate)
        total = [torch.zeros_like(p) for p in params]
        for i in chosen:
            model.zero_grad(set_to_none=True)
            with training_autocast(model):
                value = loss(model, examples[i])
            value.backward()
            grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
            scale = per_sample_scale(grads, config.clip_norm) if private else 1.0
            for acc, grad in zip(total, grads, strict=True):
                acc.add_(grad, alpha=scale)
        with torch.no_grad():
            for p, acc in zip(params, total, strict=True):
                if private:
                    std = config.noise_multiplier * config.clip_norm
                    acc.add_(torch.normal(0.0, std, acc.shape, generator=noise, device=device))
                acc.div_(config.batch_size)
                if optimiser is None:
                    p.sub_(acc, alpha=config.lr)
                else:
                    p.grad = acc
        if optimiser is not None:
            optimiser.step()
    model.zero_grad(set_to_none=True)
    model.eval()


def per_sample_scale(grads: list[torch.Tensor], clip_norm: float) -> float:
    """The factor that clips one sample's gradient to L2 norm ``clip_norm``.

    Each tensor's norm is reduced in its own dtype (the kernel accumulates blockwise, so
    its relative error stays near the dtype's epsilon) and the per-tensor norms are
    combined in float64. Casting every gradient to float64 first gave the same norm but
    copies all 135M values of SmolLM2 (``docs/measurements/working-scale.md#local_dp_sgd``).
    """
    norm = math.sqrt(sum(float(torch.linalg.vector_norm(g)) ** 2 for g in grads))
    if not math.isfinite(norm):
        raise PrivacyError("a per-sample gradient is not finite")
    return min(1.0, clip_norm / max(norm, 1e-12))
