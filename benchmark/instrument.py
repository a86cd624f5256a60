"""Which start model measured a release: the sha256 of its weights, kept as a record's
``instrument`` section so tables compare only releases measured from the same weights.

"Instrument" means the measuring instrument: the one start model the evaluator fine-tunes
each released text set from (and audits each release from), built on the machine that runs
it: the profile's on-device LM, pretrained here, then fine-tuned on the split's public part.
Two builds that differ by a bit measure differently (between one machine's build and
another's: ``docs/measurements/working-scale.md#instrument``), so a record carries the
digest of the start it was measured with, and tables set a row beside bounds only when both
were measured with the same start.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

# metrics that measure a release from the start model
START_METRICS = frozenset({"next_token", "canary"})


def weights_digest(model: Any) -> str:
    """sha256 over every named parameter and buffer (name, dtype, shape, bytes), in order:
    the same weights give the same digest on any machine."""
    import torch

    digest = hashlib.sha256()
    for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
        value = tensor.detach().cpu().contiguous()
        digest.update(f"{name}|{value.dtype}|{tuple(value.shape)}\n".encode())
        digest.update(value.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def instrument_section(metric_names: list[str], start: Callable[[], Any] | None) -> dict[str, str]:
    """The record's ``instrument``: the start model's digest when a metric measures from it
    (``{}`` otherwise: the preference track has no start)."""
    if start is None or not START_METRICS & set(metric_names):
        return {}
    return {"start_sha256": weights_digest(start())}
