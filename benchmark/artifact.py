"""What a method releases: the only thing the evaluator ever reads from a method."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

KINDS = ("texts", "labelled_texts", "model", "preferences")
PAIR_KEYS = ("prompt", "chosen", "rejected")


class ArtifactError(ValueError):
    """A released artifact is malformed; the message names the field."""


# A word vocabulary of K >= 100 words: a handful of frequent words plus <unk> is no
# language model's vocabulary, only a way to make next-token prediction easy.
TOKENIZER_PATTERN = re.compile(r"ondevice|public_llm|word_unigram:([1-9][0-9]{2,6})")
INSTRUMENT = (None, "ondevice")  # the names that mean the instrument's own vocabulary


def check_tokenizer_name(name: object, where: str) -> str:
    """``name`` if it is a vocabulary the harness builds
    (:mod:`benchmark.profiles.ondevice_kinds`), else an :class:`ArtifactError`."""
    if not isinstance(name, str) or TOKENIZER_PATTERN.fullmatch(name) is None:
        raise ArtifactError(
            f"{where}: expected 'ondevice', 'public_llm' or 'word_unigram:K' (K >= 100), "
            f"got {name!r}"
        )
    return name


@dataclass
class Artifact:
    """A method's released output.

    - ``texts``: a synthetic text set (``texts``);
    - ``labelled_texts``: synthetic texts with ``labels``;
    - ``model``: a trained on-device model saved with ``save_pretrained`` at ``model_dir``
      (``texts`` may hold the synthetic set it was trained on, if any);
    - ``preferences``: ``pairs`` of ``{"prompt", "chosen", "rejected"}``.

    ``tokenizer`` names the harness-built vocabulary a released model was trained on
    (:mod:`benchmark.profiles.ondevice_kinds`); None is the profile's on-device tokenizer.
    A name, never a file: the evaluator scores the model in that tokenizer's units.
    """

    kind: str
    texts: list[str] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    model_dir: str | None = None
    pairs: list[dict[str, str]] = field(default_factory=list)
    tokenizer: str | None = None

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Refuse a malformed release with a one-line error naming the field. Called on
        construction and again by the runner after ``finish``: a method's fields can be
        changed after construction, and a non-string text would otherwise fail deep in a
        tokenizer or an embedder."""
        if self.kind not in KINDS:
            raise ArtifactError(f"artifact.kind: must be one of {list(KINDS)}, got {self.kind!r}")
        _check_items("artifact.texts", self.texts, lambda t: isinstance(t, str), "a string")
        _check_items("artifact.labels", self.labels, _is_label, "a string or an integer")
        _check_items(
            "artifact.pairs", self.pairs, _is_pair, f"a mapping of {list(PAIR_KEYS)} to strings"
        )
        if self.model_dir is not None and not (isinstance(self.model_dir, str) and self.model_dir):
            raise ArtifactError(f"artifact.model_dir: expected a path, got {self.model_dir!r}")
        if self.tokenizer is not None:
            check_tokenizer_name(self.tokenizer, "artifact.tokenizer")
            if self.kind != "model":
                raise ArtifactError("artifact.tokenizer: only a model artifact names one")
        if self.kind == "model" and not self.model_dir:
            raise ArtifactError("artifact.model_dir: a model artifact needs model_dir")
        if self.kind == "labelled_texts" and len(self.labels) != len(self.texts):
            raise ArtifactError(
                f"artifact.labels: labelled_texts needs one label per text, got "
                f"{len(self.labels)} labels for {len(self.texts)} texts"
            )

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self)))

    @classmethod
    def load(cls, path: Path) -> Artifact:
        return cls.from_dict(json.loads(path.read_text()), str(path))

    @classmethod
    def from_dict(cls, data: Any, where: str) -> Artifact:
        """An artifact read from ``where`` (a file, another process), validated."""
        if not isinstance(data, dict):
            raise ArtifactError(f"{where}: expected a JSON object")
        unknown = sorted(set(data) - {f.name for f in fields(cls)})
        if unknown:
            raise ArtifactError(f"artifact.{unknown[0]}: unknown field ({where})")
        if "kind" not in data:
            raise ArtifactError(f"artifact.kind: required field is missing ({where})")
        return cls(**data)


def _check_items(where: str, items: Any, ok: Callable[[Any], bool], expected: str) -> None:
    if not isinstance(items, list | tuple):
        raise ArtifactError(f"{where}: expected a list, got {type(items).__name__}")
    for i, item in enumerate(items):
        if not ok(item):
            raise ArtifactError(f"{where}[{i}]: expected {expected}, got {type(item).__name__}")


def _is_label(label: Any) -> bool:
    return isinstance(label, str | int) and not isinstance(label, bool)


def _is_pair(pair: Any) -> bool:
    return isinstance(pair, dict) and all(isinstance(pair.get(k), str) for k in PAIR_KEYS)
