"""What a method releases: the only thing the evaluator ever reads from a method."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

KINDS = ("texts", "labelled_texts", "model", "preferences")


@dataclass
class Artifact:
    """A method's released output.

    - ``texts``: a synthetic text set (``texts``);
    - ``labelled_texts``: synthetic texts with ``labels``;
    - ``model``: a trained on-device model saved with ``save_pretrained`` at ``model_dir``
      (``texts`` may hold the synthetic set it was trained on, if any);
    - ``preferences``: ``pairs`` of ``{"prompt", "chosen", "rejected"}``.
    """

    kind: str
    texts: list[str] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    model_dir: str | None = None
    pairs: list[dict[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"artifact kind must be one of {KINDS}, got {self.kind!r}")
        if self.kind == "model" and not self.model_dir:
            raise ValueError("a model artifact needs model_dir")
        if self.kind == "labelled_texts" and len(self.labels) != len(self.texts):
            raise ValueError("labelled_texts needs one label per text")

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self)))

    @classmethod
    def load(cls, path: Path) -> Artifact:
        data: dict[str, Any] = json.loads(path.read_text())
        return cls(**data)
