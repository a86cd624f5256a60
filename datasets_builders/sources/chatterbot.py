"""English dialogues from the ``chatterbot-corpus`` package: offline demo corpora.

Origin: ``chatterbot_corpus/data/english/*.yml`` of the installed package (BSD licence),
located with ``importlib.util.find_spec`` and parsed with PyYAML. Version 1.3.3 has 21
English files (the 20 topic categories plus ``botprofile``) and 2,026 conversations; the
file name (``ai``, ``tech_support``, …) is the label, i.e. the control code. 1,127 of the
conversations are exact repeats (almost all in ``tech_support``), so the default text
dedupe keeps 899. Both sources are **demo corpora** that public LMs have seen; they have
no dates and no natural clients.

:class:`ChatterbotSource` yields one record per conversation, its turns joined by
newlines. Recipe: conversations are short (one 64-token span or less), so they are kept
whole (no chunking) and dealt to 100 clients with a Dirichlet(0.5) prior over
categories, a small non-IID control-code benchmark.

:class:`ChatterbotPreferenceSource` is a small offline preference set in the schema of
paper 003 (DPPrefSyn): one record per conversation with at least two turns, where

- ``extra["prompt"]`` is the first turn (also the record's ``text``),
- ``extra["chosen"]`` is the real reply (the second turn),
- ``extra["rejected"]`` is the second turn of a conversation drawn uniformly from the
  *other* categories with a different first turn (so it is a mismatched answer), and
  ``extra["rejected_from"]`` is that conversation's source id.

The draw is seeded by the source option ``seed`` (default 0). The privacy unit is one
preference tuple, so the recipe puts one tuple per client (``document`` partition),
keeps them whole and dedupes whole tuples (``record``: prompts repeat across tuples).
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import yaml

from datasets_builders.source import Source, SourceRecord

LICENCE = "BSD"


@dataclass(frozen=True)
class Dialogue:
    category: str
    source_id: str
    turns: tuple[str, ...]


def english_dir() -> Path:
    spec = importlib.util.find_spec("chatterbot_corpus")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the chatterbot sources need the chatterbot-corpus package")
    return Path(spec.submodule_search_locations[0]) / "data" / "english"


@functools.cache
def load_dialogues() -> tuple[Dialogue, ...]:
    """Every English conversation, files and conversations in a fixed order (read once)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the C parser when available
    dialogues = []
    for path in sorted(english_dir().glob("*.yml")):
        try:
            parsed = yaml.load(path.read_text(encoding="utf-8"), Loader=loader)
            conversations = parsed["conversations"]
        except (yaml.YAMLError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}: not a chatterbot corpus file ({exc})") from exc
        for index, turns in enumerate(conversations):
            dialogues.append(
                Dialogue(path.stem, f"chatterbot:{path.stem}:{index}", tuple(map(str, turns)))
            )
    return tuple(dialogues)


def _revision() -> str:
    return f"chatterbot-corpus=={importlib.metadata.version('chatterbot-corpus')}"


class ChatterbotSource(Source):
    """Chatterbot conversations labelled by category (offline demo corpus)."""

    name = "chatterbot"
    description = "chatterbot-corpus English conversations, category as control code; demo"
    demo = True
    date_field = None
    split_defaults: ClassVar[dict[str, Any]] = {
        "partition": "dirichlet",
        "partition_params": {"num_clients": 100, "alpha": 0.5},
        "span_length": None,
        "validation_clients": 0.1,
        "test_clients": 0.1,
    }

    def fetch(self, options: dict[str, Any], cache_dir: Path) -> Iterator[SourceRecord]:
        if options:
            raise ValueError(f"source 'chatterbot' takes no options, got {sorted(options)}")
        for dialogue in load_dialogues():
            yield SourceRecord(
                text="\n".join(dialogue.turns),
                source_id=dialogue.source_id,
                label=dialogue.category,
                licence=LICENCE,
            )

    def revision(self, options: dict[str, Any]) -> str:
        return _revision()


class ChatterbotPreferenceSource(Source):
    """(prompt, chosen = real reply, rejected = mismatched reply) tuples from chatterbot."""

    name = "chatterbot_prefs"
    description = "chatterbot-corpus preference tuples: real reply over a mismatched one; demo"
    demo = True
    date_field = None
    split_defaults: ClassVar[dict[str, Any]] = {
        "partition": "document",
        "span_length": None,
        "dedupe": "record",
        "validation_clients": 0.1,
        "test_clients": 0.1,
    }

    def fetch(self, options: dict[str, Any], cache_dir: Path) -> Iterator[SourceRecord]:
        unknown = sorted(set(options) - {"seed"})
        if unknown:
            raise ValueError(f"source 'chatterbot_prefs' takes only 'seed', got {unknown}")
        rng = random.Random(int(options.get("seed", 0)))
        pairs = [d for d in load_dialogues() if len(d.turns) >= 2]
        elsewhere = {d.category: [o for o in pairs if o.category != d.category] for d in pairs}
        for dialogue in pairs:
            other = rng.choice(elsewhere[dialogue.category])
            while other.turns[0] == dialogue.turns[0]:
                other = rng.choice(elsewhere[dialogue.category])
            yield SourceRecord(
                text=dialogue.turns[0],
                source_id=dialogue.source_id,
                label=dialogue.category,
                licence=LICENCE,
                extra={
                    "prompt": dialogue.turns[0],
                    "chosen": dialogue.turns[1],
                    "rejected": other.turns[1],
                    "rejected_from": other.source_id,
                },
            )

    def revision(self, options: dict[str, Any]) -> str:
        return _revision()
