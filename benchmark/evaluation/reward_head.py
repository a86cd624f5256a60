"""A Bradley-Terry reward head over sentence embeddings: the preference track's judge.

The score of a reply ``v`` in a conversation ``u`` (both embedded by a sentence encoder
no policy shares weights with) is a small network over ``[v, u*v, |u-v|]``: what the reply
says, and how it relates to what was said. It is trained on preference pairs no suite
uses (chosen reply above a negative, ``-log sigmoid(s(chosen) - s(negative))``), and the
epoch kept is the one with the best validation agreement: ``measurements/
train_reward_judge.py`` trains it, ``benchmark.profiles.shipped`` ships the result.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np


def conversation_text(prompt: str) -> str:
    """A chat prompt (``\\n\\nHuman: ...\\n\\nAssistant: ``) as the encoder reads it: the
    turns under plain speaker tags (A, B), which a sentence encoder was not trained to
    skip as markup."""
    return prompt.replace("\n\nHuman: ", "\nA: ").replace("\n\nAssistant: ", "\nB: ").strip()


def features(context: np.ndarray, reply: np.ndarray) -> np.ndarray:
    """``[v, u*v, |u-v|]`` for rows ``u`` (contexts) and ``v`` (replies)."""
    return np.concatenate([reply, context * reply, np.abs(context - reply)], axis=1)


@dataclass(frozen=True)
class RewardHead:
    """Layers ``w1, b1`` (absent for a linear head) and ``w2, b2``, and what it was trained
    on and with (``meta``: the embedder's label among them)."""

    layers: dict[str, np.ndarray]
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def hidden(self) -> int:
        return int(self.layers["w1"].shape[1]) if "w1" in self.layers else 0

    def score(self, context: np.ndarray, reply: np.ndarray) -> np.ndarray:
        import torch

        with torch.no_grad():
            return self.module(torch.from_numpy(features(context, reply))).squeeze(-1).numpy()

    @cached_property
    def module(self) -> Any:
        """The head as a torch module, its weights copied in (float32) once per head."""
        import torch

        width = self.layers["w1" if self.hidden else "w2"].shape[0]
        net = _network(width, self.hidden)
        shapes = {key: value.shape for key, value in net.state_dict().items()}
        state = {
            key: torch.from_numpy(np.ascontiguousarray(self.layers[name].T)).reshape(shapes[key])
            for name, key in _torch_keys(self.hidden).items()
        }
        net.load_state_dict(state)
        return net

    def to_bytes(self) -> bytes:
        buffer = io.BytesIO()
        np.savez(buffer, meta=np.array(json.dumps(self.meta, sort_keys=True)), **self.layers)
        return buffer.getvalue()

    @classmethod
    def load(cls, path: Path) -> RewardHead:
        with np.load(path, allow_pickle=False) as arrays:
            meta = json.loads(str(arrays["meta"]))
            layers = {k: arrays[k].astype(np.float32) for k in arrays.files if k != "meta"}
        return cls(layers, meta)


def _network(width: int, hidden: int) -> Any:
    import torch

    if not hidden:
        return torch.nn.Sequential(torch.nn.Linear(width, 1))
    return torch.nn.Sequential(
        torch.nn.Linear(width, hidden), torch.nn.GELU(), torch.nn.Linear(hidden, 1)
    )


@dataclass(frozen=True)
class Pairs:
    """Embedded preference pairs: each row's context, the chosen reply and a negative."""

    context: np.ndarray
    chosen: np.ndarray
    negative: np.ndarray

    def agreement(self, head: RewardHead) -> float:
        """The share of pairs where the head scores the chosen reply higher."""
        return float(
            np.mean(head.score(self.context, self.chosen) > head.score(self.context, self.negative))
        )


def train_head(
    train: Pairs,
    validation: Pairs,
    hidden: int,
    epochs: int = 30,
    seed: int = 0,
    lr: float = 1e-3,
    batch: int = 128,
) -> tuple[RewardHead, float, int]:
    """The head after the epoch with the best ``validation`` agreement, that agreement and
    the epoch (AdamW, weight decay 1e-4; the first best epoch on a tie)."""
    import torch

    torch.manual_seed(seed)
    net = _network(3 * train.context.shape[1], hidden)
    optimiser = torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=1e-4)
    chosen = torch.from_numpy(features(train.context, train.chosen))
    negative = torch.from_numpy(features(train.context, train.negative))
    best: tuple[float, int, RewardHead | None] = (-1.0, -1, None)
    for epoch in range(epochs):
        for rows in torch.randperm(len(chosen)).split(batch):
            margin = net(chosen[rows]).squeeze(-1) - net(negative[rows]).squeeze(-1)
            loss = -torch.nn.functional.logsigmoid(margin).mean()
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
        head = _head_of(net, hidden)
        accuracy = validation.agreement(head)
        if accuracy > best[0]:
            best = (accuracy, epoch, head)
    assert best[2] is not None
    return best[2], best[0], best[1]


def _torch_keys(hidden: int) -> dict[str, str]:
    """Each layer of the head's file and the key of its tensor in :func:`_network`'s state.

    The file keeps a weight as (inputs, outputs), the single output's column as a vector;
    torch keeps it as (outputs, inputs). Both directions read this one table.
    """
    last = "2" if hidden else "0"
    keys = {"w2": f"{last}.weight", "b2": f"{last}.bias"}
    return keys | ({"w1": "0.weight", "b1": "0.bias"} if hidden else {})


def _head_of(net: Any, hidden: int) -> RewardHead:
    state = net.state_dict()
    layers = {
        name: state[key].detach().numpy().T.copy() for name, key in _torch_keys(hidden).items()
    }
    layers["w2"] = layers["w2"][:, 0]
    return RewardHead(layers)
